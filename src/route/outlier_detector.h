#ifndef GECD_ROUTE_OUTLIER_DETECTOR_H_
#define GECD_ROUTE_OUTLIER_DETECTOR_H_

#include <chrono>

// Outlier ejection for one endpoint (route.ejection_*): consecutive connect failures or
// UNAVAILABLE answers take it out of rotation for a back-off that doubles with each ejection in
// a row, up to a cap; once the back-off has passed, a health check decides whether it returns.
// Not thread-safe: the endpoint calls it under its own lock. Time is passed in, for tests.
namespace gecd::route {

class OutlierDetector {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    int failures = 5;  // consecutive failures that eject
    std::chrono::milliseconds base{1000};
    std::chrono::milliseconds max{30000};
  };

  explicit OutlierDetector(Options options) : options_(options) {}

  // An answer that shows the endpoint works (any code but UNAVAILABLE).
  void RecordSuccess();
  // A connect failure or UNAVAILABLE. True when this failure ejected the endpoint.
  bool RecordFailure(Clock::time_point now);

  bool ejected() const { return ejected_; }
  // Ejected and its back-off over: time for a health check.
  bool DueForCheck(Clock::time_point now) const { return ejected_ && now >= until_; }
  // The health check's verdict: passing returns the endpoint; failing ejects it again with
  // the next, doubled back-off.
  void RecordCheck(bool passed, Clock::time_point now);
  // How long the current (or, when not ejected, the next) ejection lasts.
  std::chrono::milliseconds back_off() const;
  Clock::time_point ejected_until() const { return until_; }

 private:
  void Eject(Clock::time_point now);

  const Options options_;
  int consecutive_failures_ = 0;
  bool ejected_ = false;
  // Ejections in a row: an endpoint that stayed healthy for `max` after returning starts over.
  int ejections_ = 0;
  Clock::time_point until_;
  Clock::time_point returned_at_;
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_OUTLIER_DETECTOR_H_
