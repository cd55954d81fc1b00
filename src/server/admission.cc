#include "server/admission.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"

namespace gecd::server {

AdmissionController::AdmissionController(Options options, Clock clock)
    : options_(options), clock_(std::move(clock)) {}

AdmissionController::Decision AdmissionController::Admit(std::chrono::microseconds budget) {
  std::lock_guard lock(mu_);
  const int64_t now_us = clock_();
  MaybeSample(now_us);
  if (in_flight_ >= options_.max_in_flight) {
    return {Refusal::kMaxInFlight,
            absl::StrFormat("server is at its in-flight limit (server.max_in_flight %d); retry "
                            "with backoff",
                            options_.max_in_flight)};
  }
  if (rate_ > 0) {
    const double predicted_us = in_flight_ / rate_ * 1e6;
    const auto max_queue_us = static_cast<double>(
        std::chrono::duration_cast<std::chrono::microseconds>(options_.max_queue).count());
    const bool over_queue = max_queue_us > 0 && predicted_us > max_queue_us;
    const bool over_deadline =
        budget != kNoDeadline && predicted_us > static_cast<double>(budget.count());
    // Name the tighter of the two limits that the prediction exceeds.
    if (over_deadline && (!over_queue || static_cast<double>(budget.count()) <= max_queue_us)) {
      return {Refusal::kDeadline,
              absl::StrFormat("overloaded: predicted wait %.0f ms (%d queued at %.1f/s) exceeds "
                              "the %.0f ms left to the request's deadline",
                              predicted_us * 1e-3, in_flight_, rate_,
                              static_cast<double>(budget.count()) * 1e-3)};
    }
    if (over_queue) {
      return {Refusal::kMaxQueue,
              absl::StrFormat("overloaded: predicted wait %.0f ms (%d queued at %.1f/s) exceeds "
                              "server.max_queue_ms %d; retry with backoff",
                              predicted_us * 1e-3, in_flight_, rate_,
                              static_cast<int>(options_.max_queue.count()))};
    }
  }
  if (in_flight_ == 0) busy_since_us_ = now_us;
  ++in_flight_;
  return {};
}

void AdmissionController::Release() {
  std::lock_guard lock(mu_);
  const int64_t now_us = clock_();
  --in_flight_;
  ++unsampled_completions_;
  if (in_flight_ == 0) unsampled_busy_us_ += now_us - busy_since_us_;
  MaybeSample(now_us);
}

int AdmissionController::in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

double AdmissionController::service_rate() const {
  std::lock_guard lock(mu_);
  return rate_;
}

void AdmissionController::MaybeSample(int64_t now_us) {
  const int64_t busy_us = unsampled_busy_us_ + (in_flight_ > 0 ? now_us - busy_since_us_ : 0);
  const int64_t period_us =
      std::chrono::duration_cast<std::chrono::microseconds>(options_.sample_period).count();
  if (busy_us < period_us || busy_us <= 0) return;
  // Before the first completion there is nothing to measure: keep accumulating, so that the
  // first estimate spans the first sentence's whole service time.
  if (rate_ == 0 && unsampled_completions_ == 0) return;
  const double seconds = static_cast<double>(busy_us) * 1e-6;
  const double sample = static_cast<double>(unsampled_completions_) / seconds;
  if (rate_ == 0) {
    rate_ = sample;
  } else {
    const double tau =
        std::chrono::duration_cast<std::chrono::duration<double>>(options_.smoothing).count();
    const double alpha = tau > 0 ? 1 - std::exp(-seconds / tau) : 1.0;
    // A stalled engine (no completions) drives the estimate down, never to "unknown".
    rate_ = std::max(rate_ + alpha * (sample - rate_), 1e-3);
  }
  unsampled_busy_us_ = 0;
  unsampled_completions_ = 0;
  if (in_flight_ > 0) busy_since_us_ = now_us;
}

}  // namespace gecd::server
