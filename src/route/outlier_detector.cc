#include "route/outlier_detector.h"

#include <algorithm>

namespace gecd::route {

void OutlierDetector::RecordSuccess() { consecutive_failures_ = 0; }

bool OutlierDetector::RecordFailure(Clock::time_point now) {
  if (ejected_) return false;  // answers of calls sent before it was ejected
  if (++consecutive_failures_ < options_.failures) return false;
  if (ejections_ > 0 && now - returned_at_ >= options_.max) ejections_ = 0;
  Eject(now);
  return true;
}

void OutlierDetector::RecordCheck(bool passed, Clock::time_point now) {
  if (!ejected_) return;
  if (!passed) {
    Eject(now);
    return;
  }
  ejected_ = false;
  consecutive_failures_ = 0;
  returned_at_ = now;
}

std::chrono::milliseconds OutlierDetector::back_off() const {
  // The n-th ejection in a row (n >= 1) lasts base * 2^(n-1); the shift is bounded so it
  // cannot overflow before the cap applies.
  const int doublings = std::max(0, std::min(ejected_ ? ejections_ - 1 : ejections_, 30));
  const auto d = options_.base * (int64_t{1} << doublings);
  return std::min<std::chrono::milliseconds>(d, options_.max);
}

void OutlierDetector::Eject(Clock::time_point now) {
  ejected_ = true;
  ++ejections_;
  until_ = now + back_off();
}

}  // namespace gecd::route
