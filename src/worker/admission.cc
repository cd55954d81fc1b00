#include "worker/admission.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"

namespace gecd::server {
namespace {

AdmissionController::Decision Refused(AdmissionController::Refusal refusal, std::string message) {
  AdmissionController::Decision decision;
  decision.refusal = refusal;
  decision.message = std::move(message);
  return decision;
}

}  // namespace

AdmissionController::AdmissionController(Options options, Clock clock)
    : options_(options), clock_(std::move(clock)) {}

AdmissionController::Decision AdmissionController::Admit(std::chrono::microseconds budget) {
  MutexLock lock(&mu_);
  const int64_t now_us = clock_();
  Advance(now_us);
  if (in_flight_ >= options_.max_in_flight) {
    return Refused(
        Refusal::kMaxInFlight,
        absl::StrFormat("server is at its in-flight limit (server.max_in_flight %d); retry "
                        "with backoff",
                        options_.max_in_flight));
  }
  const double rate = Rate();
  if (rate > 0 && in_flight_ > 0) {
    const double predicted_us = in_flight_ / rate * 1e6;
    const auto max_queue_us = static_cast<double>(
        std::chrono::duration_cast<std::chrono::microseconds>(options_.max_queue).count());
    const bool over_queue = max_queue_us > 0 && predicted_us > max_queue_us;
    const bool over_deadline =
        budget != kNoDeadline && predicted_us > static_cast<double>(budget.count());
    // Name the tighter of the two limits that the prediction exceeds.
    if (over_deadline && (!over_queue || static_cast<double>(budget.count()) <= max_queue_us)) {
      return Refused(
          Refusal::kDeadline,
          absl::StrFormat("overloaded: predicted wait %.0f ms (%d queued at %.1f/s) exceeds "
                          "the %.0f ms left to the request's deadline",
                          predicted_us * 1e-3, in_flight_, rate,
                          static_cast<double>(budget.count()) * 1e-3));
    }
    if (over_queue) {
      return Refused(
          Refusal::kMaxQueue,
          absl::StrFormat("overloaded: predicted wait %.0f ms (%d queued at %.1f/s) exceeds "
                          "server.max_queue_ms %d; retry with backoff",
                          predicted_us * 1e-3, in_flight_, rate,
                          static_cast<int>(options_.max_queue.count())));
    }
  }
  ++in_flight_;
  Decision admitted;
  admitted.ticket = {.admitted_us = now_us, .held_us = held_us_};
  return admitted;
}

void AdmissionController::Release(const Ticket& ticket) {
  MutexLock lock(&mu_);
  const int64_t now_us = clock_();
  Advance(now_us);
  const double tau =
      std::chrono::duration_cast<std::chrono::duration<double>>(options_.smoothing).count();
  const double decay =
      tau > 0 ? std::exp(-static_cast<double>(busy_since_release_us_) * 1e-6 / tau) : 0.0;
  busy_since_release_us_ = 0;
  in_flight_mean_.Decay(decay);
  sojourn_mean_.Decay(decay);
  const int64_t sojourn_us = now_us - ticket.admitted_us;
  in_flight_mean_.Add(sojourn_us > 0 ? (held_us_ - ticket.held_us) / static_cast<double>(sojourn_us)
                                     : static_cast<double>(in_flight_));
  sojourn_mean_.Add(static_cast<double>(sojourn_us) * 1e-6);
  --in_flight_;
}

int AdmissionController::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

double AdmissionController::service_rate() const {
  MutexLock lock(&mu_);
  return Rate();
}

void AdmissionController::Advance(int64_t now_us) {
  const int64_t elapsed_us = now_us - last_event_us_;
  last_event_us_ = now_us;
  if (in_flight_ == 0 || elapsed_us <= 0) return;
  busy_since_release_us_ += elapsed_us;
  held_us_ += static_cast<double>(in_flight_) * static_cast<double>(elapsed_us);
}

double AdmissionController::Rate() const {
  if (sojourn_mean_.weight <= 0 || in_flight_mean_.weight <= 0) return 0;
  const double sojourn = sojourn_mean_.sum / sojourn_mean_.weight;
  if (sojourn <= 0) return 0;
  return in_flight_mean_.sum / in_flight_mean_.weight / sojourn;
}

}  // namespace gecd::server
