#ifndef GECD_LOADGEN_RATE_PROFILE_H_
#define GECD_LOADGEN_RATE_PROFILE_H_

#include <string_view>

#include "absl/status/statusor.h"

namespace gecd::loadgen {

// The offered request rate of an open-loop run as a function of time since the end of warmup
// (warmup runs at the rate of t = 0): constant, a linear ramp over the run, or a diurnal sine.
class RateProfile {
 public:
  static RateProfile Constant(double qps);
  static RateProfile Ramp(double from_qps, double to_qps, double duration_s);
  // Starts at min_qps, peaks at max_qps half a period later.
  static RateProfile Diurnal(double min_qps, double max_qps, double period_s);

  // "ramp:FROM:TO" (over duration_s) or "diurnal:MIN:MAX:PERIOD_S".
  static absl::StatusOr<RateProfile> Parse(std::string_view spec, double duration_s);

  double At(double t_s) const;  // requests per second; t < 0 counts as 0
  double Peak() const;

 private:
  enum class Shape { kConstant, kRamp, kDiurnal };
  RateProfile(Shape shape, double low, double high, double span_s)
      : shape_(shape), low_(low), high_(high), span_s_(span_s) {}

  Shape shape_;
  double low_;     // the rate at t = 0
  double high_;    // the rate at the end of the ramp, or the diurnal peak
  double span_s_;  // ramp duration or diurnal period
};

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_RATE_PROFILE_H_
