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
  Advance(now_us);
  if (in_flight_ >= options_.max_in_flight) {
    return {Refusal::kMaxInFlight,
            absl::StrFormat("server is at its in-flight limit (server.max_in_flight %d); retry "
                            "with backoff",
                            options_.max_in_flight)};
  }
  const double rate = Rate(now_us);
  if (rate > 0 && in_flight_ > 0) {
    const double predicted_us = in_flight_ / rate * 1e6;
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
                              predicted_us * 1e-3, in_flight_, rate,
                              static_cast<double>(budget.count()) * 1e-3)};
    }
    if (over_queue) {
      return {Refusal::kMaxQueue,
              absl::StrFormat("overloaded: predicted wait %.0f ms (%d queued at %.1f/s) exceeds "
                              "server.max_queue_ms %d; retry with backoff",
                              predicted_us * 1e-3, in_flight_, rate,
                              static_cast<int>(options_.max_queue.count()))};
    }
  }
  ++in_flight_;
  admitted_us_sum_ += now_us;
  return {.refusal = Refusal::kNone, .message = {}, .admitted_us = now_us};
}

void AdmissionController::Release(int64_t admitted_us) {
  std::lock_guard lock(mu_);
  const int64_t now_us = clock_();
  Advance(now_us);
  --in_flight_;
  admitted_us_sum_ -= admitted_us;
  sojourn_mean_.Add(static_cast<double>(now_us - admitted_us) * 1e-6, 1.0);
}

int AdmissionController::in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

double AdmissionController::service_rate() const {
  std::lock_guard lock(mu_);
  return Rate(clock_());
}

void AdmissionController::Advance(int64_t now_us) {
  const int64_t elapsed_us = now_us - last_event_us_;
  last_event_us_ = now_us;
  if (in_flight_ == 0 || elapsed_us <= 0) return;
  const double seconds = static_cast<double>(elapsed_us) * 1e-6;
  const double tau =
      std::chrono::duration_cast<std::chrono::duration<double>>(options_.smoothing).count();
  // The interval's own weight is its exponentially weighted length, so the means do not depend
  // on how often events sample them.
  const double decay = tau > 0 ? std::exp(-seconds / tau) : 0.0;
  const double weight = tau > 0 ? tau * (1 - decay) : seconds;
  in_flight_mean_.Decay(decay);
  in_flight_mean_.Add(in_flight_, weight);
  sojourn_mean_.Decay(decay);
}

double AdmissionController::SojournSeconds(int64_t now_us) const {
  const double measured = sojourn_mean_.weight > 0 ? sojourn_mean_.sum / sojourn_mean_.weight : 0.0;
  if (in_flight_ == 0) return measured;
  // Each sentence in flight takes at least its age: without this an engine that stopped
  // answering would leave W as it was, and L would grow with what is admitted meanwhile.
  const double mean_age_us =
      static_cast<double>(now_us) - static_cast<double>(admitted_us_sum_) / in_flight_;
  return std::max(measured, mean_age_us * 1e-6);
}

double AdmissionController::Rate(int64_t now_us) const {
  const double sojourn = SojournSeconds(now_us);
  if (sojourn <= 0 || in_flight_mean_.weight <= 0) return 0;
  return in_flight_mean_.sum / in_flight_mean_.weight / sojourn;
}

}  // namespace gecd::server
