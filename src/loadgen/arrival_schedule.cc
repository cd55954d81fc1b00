#include "loadgen/arrival_schedule.h"

namespace gecd::loadgen {

ArrivalSchedule::ArrivalSchedule(RateProfile profile, double warmup_s, uint64_t seed)
    : profile_(profile),
      warmup_s_(warmup_s),
      peak_(profile.Peak()),
      rng_(seed),
      gap_(profile.Peak()) {}

double ArrivalSchedule::Next() {
  while (true) {
    t_ += gap_(rng_);
    if (coin_(rng_) * peak_ <= profile_.At(t_ - warmup_s_)) return t_;
  }
}

}  // namespace gecd::loadgen
