#ifndef GECD_LOADGEN_ARRIVAL_SCHEDULE_H_
#define GECD_LOADGEN_ARRIVAL_SCHEDULE_H_

#include <cstdint>
#include <random>

#include "loadgen/rate_profile.h"

namespace gecd::loadgen {

// The intended send times of an open-loop run: a Poisson process whose rate follows a
// RateProfile, drawn by thinning (candidates at the profile's peak rate, each kept with
// probability rate(t) / peak), which is exact for any profile shape. Deterministic for a seed.
class ArrivalSchedule {
 public:
  // Profile time 0 is warmup_s after the first arrival's time origin.
  ArrivalSchedule(RateProfile profile, double warmup_s, uint64_t seed);

  // Seconds since the start of the run of the next arrival; strictly increasing.
  double Next();

 private:
  RateProfile profile_;
  double warmup_s_;
  double peak_;
  double t_ = 0;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_;
  std::uniform_real_distribution<double> coin_{0.0, 1.0};
};

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_ARRIVAL_SCHEDULE_H_
