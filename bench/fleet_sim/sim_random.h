#ifndef GECD_BENCH_FLEET_SIM_SIM_RANDOM_H_
#define GECD_BENCH_FLEET_SIM_SIM_RANDOM_H_

#include <cmath>
#include <cstdint>
#include <random>

namespace gecd::fleet_sim {

// A seeded random stream that gives the same numbers on every platform: mt19937_64's output is
// fixed by the standard, but the standard libraries' distributions are not (libstdc++ and libc++
// differ), so the draws below are written out. Each part of a simulation owns its own stream
// (StreamSeed), so changing the routing policy leaves the arrival times exactly as they were.
class SimRandom {
 public:
  explicit SimRandom(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1), 53 random bits.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  // Uniform in [0, n) for n >= 1; multiply-shift, biased by at most n / 2^64.
  uint32_t Below(uint32_t n) {
    return static_cast<uint32_t>((static_cast<unsigned __int128>(engine_()) * n) >> 64);
  }

  // An exponential gap of an event stream with `rate` events per unit time.
  double Exponential(double rate) { return -std::log1p(-Uniform()) / rate; }

 private:
  std::mt19937_64 engine_;
};

// The seed of stream `stream` of a run seeded with `seed` (SplitMix64 of the pair), so that
// nearby seeds and streams give unrelated sequences.
inline uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace gecd::fleet_sim

#endif  // GECD_BENCH_FLEET_SIM_SIM_RANDOM_H_
