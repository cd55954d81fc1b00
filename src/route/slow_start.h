#ifndef GECD_ROUTE_SLOW_START_H_
#define GECD_ROUTE_SLOW_START_H_

// A newly eligible endpoint's weight (route.slow_start_*): Envoy's slow-start curve, so that a
// pod that just became ready, with cold caches, is not handed a full share at once.
namespace gecd::route {

struct SlowStart {
  double window_s = 10;     // 0: no ramp, every endpoint weighs 1
  double min_weight = 0.1;  // the weight at the start, so that the endpoint gets some traffic
  double aggression = 1.0;  // > 1 ramps faster early, < 1 slower

  // max(min_weight, (t / window)^(1 / aggression)), and 1 from `window_s` on.
  double Weight(double seconds_since_eligible) const;
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_SLOW_START_H_
