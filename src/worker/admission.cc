#include "worker/admission.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"

namespace gecd::worker {
namespace {

// The share of admitted sentences the margin lets finish after their budget, and how far one
// late answer moves it (log scale).
constexpr double kLateShare = 0.005;
constexpr double kMarginGain = 0.1;

// A margin below 1 was learned at the loads answers came from: a sentence admitted with more
// in flight than kBeyondSeen times the most that answers in time were admitted with (over about
// kSeenAheadMemoryUs) is judged at a margin of at least 1. At the start of a flood after a light
// load (closed loop of 1,024 after one of 64) the margin sat at its floor 0.7, and the flood was
// admitted up to 1.4 s predicted.
constexpr double kBeyondSeen = 1.25;
constexpr double kSeenAheadMemoryUs = 10e6;

// A refused client is told to come back after no less and no more than this.
constexpr std::chrono::milliseconds kMinRetryAfter{5};
constexpr std::chrono::milliseconds kMaxRetryAfter{10'000};
// Without a prediction (before the first completion): when to come back from max_in_flight.
constexpr std::chrono::milliseconds kDefaultRetryAfter{100};

double Us(std::chrono::microseconds d) { return static_cast<double>(d.count()); }

}  // namespace

AdmissionController::AdmissionController(Options options, Clock clock)
    : options_(options),
      clock_(std::move(clock)),
      margin_cell_(options_.shared_margin != nullptr ? options_.shared_margin : &own_margin_) {}

AdmissionController::Decision AdmissionController::Admit(std::chrono::microseconds budget,
                                                         std::span<const size_t> sentence_bytes,
                                                         int max_output_tokens, Priority priority) {
  MutexLock lock(&mu_);
  const int64_t now_us = clock_();
  Advance(now_us);
  CountOverdue(now_us);
  Decision decision;
  const StepModel model = Model();
  const int ahead = in_flight_ + model.others;
  const int along = static_cast<int>(sentence_bytes.size());
  // The text takes as long as its longest sentence.
  double output = 0;
  for (size_t bytes : sentence_bytes) {
    output = std::max(output, PredictOutput(bytes, max_output_tokens));
  }
  const double predicted_us = PredictUs(model, ahead, output, along);
  // How long the sentences ahead take to leave, each.
  const int leaving_batch = std::max(1, model.Batch(ahead));
  const double leave_us =
      model.Steps(output_.Ratio()) * model.StepUs(leaving_batch) / leaving_batch;
  const std::string what =
      along == 1 ? std::string("") : absl::StrFormat("a text of %d sentences: ", along);
  if (in_flight_ > 0 && in_flight_ + along > options_.max_in_flight) {
    decision.refusal = Refusal::kMaxInFlight;
    decision.retry_after = leave_us > 0
                               ? Jittered(leave_us * (in_flight_ + along - options_.max_in_flight))
                               : kDefaultRetryAfter;
    decision.message = absl::StrFormat(
        "%sserver is at its in-flight limit (server.max_in_flight %d); retry after %d ms", what,
        options_.max_in_flight, decision.retry_after.count());
    return decision;
  }
  const bool batch = priority == Priority::kBatch;
  const double slo_us = Us(std::chrono::duration_cast<std::chrono::microseconds>(options_.slo)) *
                        (batch ? kBatchShare : 1.0);
  const bool deadline_first = !batch && budget != kNoDeadline && Us(budget) < slo_us;
  const double limit_us = deadline_first ? Us(budget) : slo_us;
  // Read once: other workers steer the shared margin between two reads.
  const double learned = this->margin();
  const double margin =
      std::max(ahead + along > kBeyondSeen * SeenAheadAt(now_us) ? std::max(1.0, learned) : learned,
               MarkedMargin(now_us, ahead + along));
  if (step_us_.weight <= 0 && in_flight_ > 0 &&
      in_flight_ + along > (batch ? kStartWindow / 2 : kStartWindow)) {
    decision.refusal = Refusal::kNoEstimate;
    decision.retry_after = kDefaultRetryAfter;
    decision.message = absl::StrFormat(
        "%soverloaded: %d sentences in flight before the first answer told how long they take; "
        "retry after %d ms",
        what, in_flight_, decision.retry_after.count());
    return decision;
  }
  if (in_flight_ > 0 && predicted_us * margin > limit_us) {
    // The sentences that must leave before this text would fit, at the rate they leave.
    int fits = ahead;
    while (fits > 0 && PredictUs(model, fits, output, along) * margin > limit_us) --fits;
    decision.retry_after = Jittered(leave_us * std::max(1, ahead - fits));
    decision.refusal = deadline_first ? Refusal::kDeadline : Refusal::kSlo;
    const std::string limit =
        deadline_first
            ? absl::StrFormat("the %.0f ms left to the request's deadline", limit_us * 1e-3)
        : batch ? absl::StrFormat(
                      "the %.0f ms that batch work may use of the latency objective "
                      "(server.slo_p99_ms)",
                      limit_us * 1e-3)
                : absl::StrFormat("the latency objective of %.0f ms (server.slo_p99_ms)",
                                  limit_us * 1e-3);
    decision.message = absl::StrFormat(
        "%soverloaded: predicted %.0f ms (%d sentences in flight, ~%.0f output tokens) exceeds "
        "%s; retry after %d ms",
        what, predicted_us * margin * 1e-3, ahead, output, limit, decision.retry_after.count());
    return decision;
  }
  in_flight_ += along;
  if (options_.publish_in_flight) options_.publish_in_flight(in_flight_);
  decision.tickets.reserve(sentence_bytes.size());
  for (size_t bytes : sentence_bytes) {
    // Each sentence's own prediction (in its text's batch), against which its answer is judged.
    Ticket& ticket = decision.tickets.emplace_back(Ticket{
        .admitted_us = now_us,
        .held_us = held_us_,
        .text_bytes = bytes,
        .predicted_us =
            along == 1 ? predicted_us
                       : PredictUs(model, ahead, PredictOutput(bytes, max_output_tokens), along),
        .budget_us = limit_us,
        .ahead = ahead + along,
        .margin = margin});
    if (ticket.predicted_us > 0) {
      ticket.watch = ++last_watch_;
      ticket.due_us = now_us + static_cast<int64_t>(limit_us);
      watched_.emplace(std::make_pair(ticket.due_us, ticket.watch), ticket);
    }
  }
  return decision;
}

double AdmissionController::Release(const Ticket& ticket, int output_tokens) {
  MutexLock lock(&mu_);
  const int64_t now_us = clock_();
  Advance(now_us);
  // Judged once: here, unless it was already counted late while it ran.
  const bool unjudged = Unwatch(ticket);
  CountOverdue(now_us);
  const double tau =
      std::chrono::duration_cast<std::chrono::duration<double>>(options_.smoothing).count();
  const double decay =
      tau > 0 ? std::exp(-static_cast<double>(busy_since_release_us_) * 1e-6 / tau) : 0.0;
  busy_since_release_us_ = 0;
  step_us_.Decay(decay);
  output_per_byte_.Decay(decay);
  output_.Decay(decay);
  const auto sojourn_us = static_cast<double>(now_us - ticket.admitted_us);
  double error = 0;
  if (output_tokens >= 0 && sojourn_us > 0) {
    // The mean in flight during its stay, itself included.
    const double held = std::max(1.0, (held_us_ - ticket.held_us) / sojourn_us);
    step_us_.Add(sojourn_us, (output_tokens + 1) * held);
    if (ticket.text_bytes > 0) {
      output_per_byte_.Add(output_tokens, static_cast<double>(ticket.text_bytes));
    }
    output_.Add(output_tokens);
    if (ticket.predicted_us > 0) {
      error = sojourn_us / ticket.predicted_us;
      if (unjudged && sojourn_us > ticket.budget_us) {
        Late(ticket, now_us);
      } else if (unjudged) {
        SteerMargin(/*late=*/false, now_us);
      }
      if (sojourn_us <= ticket.budget_us) {
        seen_ahead_ = std::max(SeenAheadAt(now_us), static_cast<double>(ticket.ahead));
        seen_ahead_us_ = now_us;
      }
    }
  } else if (output_tokens == kMissedDeadline && unjudged) {
    Late(ticket, now_us);
  }
  --in_flight_;
  if (options_.publish_in_flight) options_.publish_in_flight(in_flight_);
  return error;
}

double AdmissionController::SeenAheadAt(int64_t now_us) const {
  return seen_ahead_ * std::exp(-static_cast<double>(now_us - seen_ahead_us_) / kSeenAheadMemoryUs);
}

void AdmissionController::CountOverdue(int64_t now_us) {
  while (!watched_.empty() && watched_.begin()->first.first < now_us) {
    const Ticket overdue = watched_.begin()->second;
    watched_.erase(watched_.begin());
    Late(overdue, now_us);
  }
}

bool AdmissionController::Unwatch(const Ticket& ticket) {
  return ticket.watch != 0 && watched_.erase({ticket.due_us, ticket.watch}) > 0;
}

double AdmissionController::margin() const { return margin_cell_->Value(); }

void AdmissionController::Late(const Ticket& ticket, int64_t now_us) {
  SteerMargin(/*late=*/true, now_us);
  // The three words are written without a lock: two workers marking at once may lose one's
  // update, which their bursts' next late sentence repeats.
  ipc::SharedMargin& cell = *margin_cell_;
  const double mark = cell.MarkAt(now_us);
  const double asked = std::min(kMaxMargin, kMarkHeadroom * ticket.margin);
  // Marked higher, from the load it was admitted with; or held, from the lesser load. Within a
  // burst (a mark set less than an objective ago) a higher mark keeps the burst's least load: a
  // flood's late sentences are counted in the order they were admitted, at growing loads and
  // margins, and a mark moved up to the last one's load left the loads between to the margin.
  const int64_t in_flight = cell.MarkInFlight();
  const bool same_burst =
      in_flight > 0 &&
      now_us - cell.mark_us.load(std::memory_order_relaxed) <
          std::chrono::duration_cast<std::chrono::microseconds>(options_.slo).count();
  cell.mark_in_flight.store(
      asked > mark && !same_burst ? ticket.ahead : std::min<int64_t>(in_flight, ticket.ahead),
      std::memory_order_relaxed);
  cell.mark_bits.store(std::bit_cast<uint64_t>(std::max(mark, asked)), std::memory_order_relaxed);
  cell.mark_us.store(now_us, std::memory_order_relaxed);
}

double AdmissionController::MarkedMargin(int64_t now_us, int in_flight) const {
  const ipc::SharedMargin& cell = *margin_cell_;
  // A set mark applies from at least one sentence (its own).
  const int64_t from = cell.MarkInFlight();
  if (from == 0 || in_flight < kMarkLoad * static_cast<double>(from)) return 0;
  return cell.MarkAt(now_us);
}

void AdmissionController::SteerMargin(bool late, int64_t now_us) {
  ipc::SharedMargin& cell = *margin_cell_;
  // How far the margin relaxes first: the time since the relaxation was last applied, or since
  // the last late answer's quiet ended, whichever is later, claimed by one worker only.
  double relax_us = 0;
  if (late) {
    int64_t last = cell.last_late_us.load(std::memory_order_relaxed);
    while (last < now_us &&
           !cell.last_late_us.compare_exchange_weak(last, now_us, std::memory_order_relaxed)) {
    }
    cell.in_time_run.store(0, std::memory_order_relaxed);
    cell.run_quiet_us.store(0, std::memory_order_relaxed);
  } else if (cell.in_time_run.fetch_add(1, std::memory_order_relaxed) + 1 == kQuietAnswers) {
    cell.run_quiet_us.store(now_us, std::memory_order_relaxed);
  }
  if (!late && margin() > 1) {
    const int64_t quiet_us = std::chrono::microseconds(kMarginQuiet).count();
    int64_t quiet_end_us = cell.last_late_us.load(std::memory_order_relaxed) + quiet_us;
    // A busy pod is quiet sooner: after kQuietAnswers in time in a row.
    const int64_t run_quiet_us = cell.run_quiet_us.load(std::memory_order_relaxed);
    if (run_quiet_us != 0) quiet_end_us = std::min(quiet_end_us, run_quiet_us);
    int64_t relaxed = cell.relaxed_us.load(std::memory_order_relaxed);
    while (now_us > std::max(relaxed, quiet_end_us)) {
      if (cell.relaxed_us.compare_exchange_weak(relaxed, now_us, std::memory_order_relaxed)) {
        relax_us = static_cast<double>(now_us - std::max(relaxed, quiet_end_us));
        break;
      }
    }
  }
  const double half_life_us = std::chrono::microseconds(kMarginHalfLife).count();
  const double step = std::exp(kMarginGain * ((late ? 1.0 : 0.0) - kLateShare));
  uint64_t bits = cell.margin_bits.load(std::memory_order_relaxed);
  while (true) {
    double margin = ipc::SharedMargin::Of(bits);
    if (relax_us > 0 && margin > 1) margin = std::pow(margin, std::exp2(-relax_us / half_life_us));
    const double steered = std::clamp(margin * step, kMinMargin, kMaxMargin);
    if (cell.margin_bits.compare_exchange_weak(bits, std::bit_cast<uint64_t>(steered),
                                               std::memory_order_relaxed)) {
      return;
    }
  }
}

int AdmissionController::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

std::chrono::microseconds AdmissionController::PredictedTime(size_t text_bytes) const {
  MutexLock lock(&mu_);
  const StepModel model = Model();
  return std::chrono::microseconds(static_cast<int64_t>(
      PredictUs(model, in_flight_ + model.others, PredictOutput(text_bytes, 0)) * margin()));
}

double AdmissionController::step_seconds_per_sentence() const {
  MutexLock lock(&mu_);
  return step_us_.Ratio() * 1e-6;
}

double AdmissionController::output_tokens_per_byte() const {
  MutexLock lock(&mu_);
  return output_per_byte_.Ratio();
}

void AdmissionController::Advance(int64_t now_us) {
  const int64_t elapsed_us = now_us - last_event_us_;
  last_event_us_ = now_us;
  if (in_flight_ == 0 || elapsed_us <= 0) return;
  busy_since_release_us_ += elapsed_us;
  held_us_ += static_cast<double>(in_flight_) * static_cast<double>(elapsed_us);
}

double AdmissionController::PredictOutput(size_t text_bytes, int max_output_tokens) const {
  const double output = output_per_byte_.Ratio() * static_cast<double>(text_bytes);
  return max_output_tokens > 0 ? std::min(output, static_cast<double>(max_output_tokens)) : output;
}

AdmissionController::StepModel AdmissionController::Model() const {
  const EngineLoad load = options_.engine_load ? options_.engine_load() : EngineLoad{};
  if (load.known()) {
    return {.fixed_us = load.step_fixed_us,
            .per_sequence_us = load.step_per_sequence_us,
            .others = std::max(0, load.others_admitted),
            .max_batch = std::max(1, options_.max_batch_size),
            .tokens_per_step = load.tokens_per_step >= 1 ? load.tokens_per_step : 1.0};
  }
  return {.per_sequence_us = step_us_.Ratio()};
}

double AdmissionController::PredictUs(const StepModel& model, int ahead, double output,
                                      int along) const {
  // Output lengths are learned from answers: before the first, a prediction would be of a
  // sentence with no output, and its error would only mislead the margin.
  if (output_.weight <= 0) return 0;
  const int in_flight = ahead + along;
  const int batch = model.Batch(in_flight);
  const double queued =
      static_cast<double>(in_flight - batch) * model.Steps(output_.Ratio()) / std::max(1, batch);
  return (model.Steps(output) + queued) * model.StepUs(batch);
}

std::chrono::milliseconds AdmissionController::Jittered(double us) {
  // Uniform in [0.5, 1.5): xorshift64, enough to spread a crowd's retries.
  jitter_state_ ^= jitter_state_ << 13;
  jitter_state_ ^= jitter_state_ >> 7;
  jitter_state_ ^= jitter_state_ << 17;
  const double u = static_cast<double>(jitter_state_ >> 11) * 0x1.0p-53;
  const auto ms = std::chrono::milliseconds(static_cast<int64_t>(us * (0.5 + u) * 1e-3));
  return std::clamp(ms, kMinRetryAfter, kMaxRetryAfter);
}

}  // namespace gecd::worker
