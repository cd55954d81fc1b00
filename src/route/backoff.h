#ifndef GECD_ROUTE_BACKOFF_H_
#define GECD_ROUTE_BACKOFF_H_

#include <algorithm>
#include <cstdint>
#include <random>

#include "absl/time/time.h"

namespace gecd::route {

// Exponential back-off with jitter for retrying discovery requests: the n-th delay after a
// Reset() is drawn uniformly from [d/2, d] with d = min(initial * 2^n, max), so that many
// routers failing together do not retry in step. Not thread-safe (one retry loop owns it).
class Backoff {
 public:
  Backoff(absl::Duration initial, absl::Duration max, uint64_t seed = std::random_device{}())
      : initial_(initial), max_(std::max(initial, max)), next_(initial), random_(seed) {}

  absl::Duration Next() {
    const absl::Duration d = next_;
    next_ = std::min(next_ * 2, max_);
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    return d * jitter(random_);
  }
  void Reset() { next_ = initial_; }

 private:
  const absl::Duration initial_;
  const absl::Duration max_;
  absl::Duration next_;
  std::mt19937_64 random_;
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_BACKOFF_H_
