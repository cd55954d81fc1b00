#include "route/slow_start.h"

#include <algorithm>
#include <cmath>

namespace gecd::route {

double SlowStart::Weight(double seconds_since_eligible) const {
  if (window_s <= 0 || seconds_since_eligible >= window_s) return 1.0;
  const double t = std::max(0.0, seconds_since_eligible) / window_s;
  return std::max(min_weight, std::pow(t, 1.0 / aggression));
}

}  // namespace gecd::route
