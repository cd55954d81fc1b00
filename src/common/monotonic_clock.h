#ifndef GECD_COMMON_MONOTONIC_CLOCK_H_
#define GECD_COMMON_MONOTONIC_CLOCK_H_

#include <chrono>
#include <cstdint>

// The one clock that time stamps crossing a process boundary use: steady_clock, which is
// CLOCK_MONOTONIC on Linux and so shared by every process of the host. Workers stamp a
// request's arrival and deadline with it; the engine process compares them with its own reading.
namespace gecd {

inline int64_t MonotonicMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace gecd

#endif  // GECD_COMMON_MONOTONIC_CLOCK_H_
