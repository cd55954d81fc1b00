#include "loadgen/rate_profile.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gecd::loadgen {

RateProfile RateProfile::Constant(double qps) { return {Shape::kConstant, qps, qps, 0}; }

RateProfile RateProfile::Ramp(double from_qps, double to_qps, double duration_s) {
  return {Shape::kRamp, from_qps, to_qps, duration_s};
}

RateProfile RateProfile::Diurnal(double min_qps, double max_qps, double period_s) {
  return {Shape::kDiurnal, min_qps, max_qps, period_s};
}

absl::StatusOr<RateProfile> RateProfile::Parse(std::string_view spec, double duration_s) {
  const std::vector<std::string> parts = absl::StrSplit(std::string(spec), ':');
  std::vector<double> values;
  for (size_t i = 1; i < parts.size(); ++i) {
    double v;
    if (!absl::SimpleAtod(parts[i], &v) || !(v >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--profile ", std::string(spec), ": '", parts[i], "' is not a rate >= 0"));
    }
    values.push_back(v);
  }
  if (parts[0] == "ramp" && values.size() == 2 && std::max(values[0], values[1]) > 0) {
    return Ramp(values[0], values[1], duration_s);
  }
  if (parts[0] == "diurnal" && values.size() == 3 && values[1] >= values[0] && values[1] > 0 &&
      values[2] > 0) {
    return Diurnal(values[0], values[1], values[2]);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--profile ", std::string(spec),
      ": expected ramp:FROM:TO or diurnal:MIN:MAX:PERIOD_S (MAX >= MIN, a positive peak)"));
}

double RateProfile::At(double t_s) const {
  t_s = std::max(t_s, 0.0);
  switch (shape_) {
    case Shape::kConstant:
      return low_;
    case Shape::kRamp:
      return span_s_ <= 0 ? high_ : low_ + (high_ - low_) * std::min(t_s / span_s_, 1.0);
    case Shape::kDiurnal:
      return low_ + (high_ - low_) * (1 - std::cos(2 * std::numbers::pi * t_s / span_s_)) / 2;
  }
  return low_;
}

double RateProfile::Peak() const { return std::max(low_, high_); }

}  // namespace gecd::loadgen
