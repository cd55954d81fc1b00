#ifndef GECD_WORKER_ADMISSION_H_
#define GECD_WORKER_ADMISSION_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "ipc/shared_segment.h"
#include "worker/engine_link.h"

// Latency-objective admission for one worker: a sentence is refused at once (RESOURCE_EXHAUSTED)
// when the worker predicts it could not be answered within the latency objective
// (server.slo_p99_ms) or the call's deadline, whichever is sooner, instead of queueing it until
// it is late.
namespace gecd::worker {

// Owns the worker's admitted-but-unfinished sentences and what it has learned from the finished
// ones, and decides on each arrival before the text is read (no validation, tokenization or
// spelling), so a refusal costs little more than the gRPC call that carried it.
//
// The engine batches: every sentence in flight runs in every step, each step emits one token per
// sentence, and a step takes longer the more sentences it runs. So a sentence's time in the
// server is about (its output tokens + 1) steps, each as long as the batch makes it. The engine
// measures the time between two steps of a sequence (one step, or with drafts one that verifies
// them) and publishes the line step(n) = fixed + per_sequence * n for n sequences running
// (engine_host/engine_process.cc), and every worker publishes how many sentences it holds, so
// with n sentences in flight across the workers, this one included:
//
//   predicted = (output / tokens_per_step + 1 + queued) * step(min(n, max_batch_size))
//
// where tokens_per_step, the output tokens a sequence gains per step, is 1 unless the engine
// verifies drafts (speculative decoding: it publishes what it measures, ~3-7 on corrections),
// and queued, the steps a sentence beyond the engine's batch waits for others to leave, is
// (n - max_batch_size) * (mean output / tokens_per_step + 1) / max_batch_size. Until the engine has
// published its step time (or with a link that cannot tell), each worker learns theta, a time per
// step per sentence in its own flight, from its finished sentences, as a ratio of sums, sum(time) /
// sum((output + 1) * mean in flight during its stay), and predicts theta * (output + 1) *
// (in_flight + 1): proportional to the batch, which overstates a larger batch by the step's
// fixed part. Whatever is learned from finished sentences is smoothed over the completions of
// about `smoothing` of busy time. The output length of a new sentence, which is not known before
// the model has run, is predicted from its text's length by the learned ratio of output tokens
// to text bytes (for a correction, about the input's own length). A long sentence thus costs
// what it will really hold the engine for, and is refused sooner under load than a short one.

// The prediction is of a typical sentence; the objective is a 99th percentile. So admission
// compares predicted * margin with the budget, and steers the margin by what happens: each
// admitted sentence answered later than the budget it was admitted against raises it by a
// tenth, each one in time lowers it by a two-hundredth of that, which holds the share of late
// answers at about 0.5% (a quantile tracker). A fixed allowance for the spread of predictions
// (the mean ratio actual / predicted plus 2.33 spreads, before) refused, at the very rate a
// load test finds to be the capacity, the long sentences whose predicted length ran a little
// over: they would have finished in time. This one admits them while answers keep in time, and
// under overload, where every admitted sentence is near its budget, it refuses more until they
// do. The budget is the call's own deadline if that is sooner than the objective, else the
// objective: a client looser than the objective does not let the queue grow past it.
// A tracker moved by answers recovers at the pace answers come: after an overload that took
// the margin to its top, a pod at 5 answers per second took six minutes to come down, and
// refused its long sentences all along (admission bench, session 14: JFLEG find-max 1.2 req/s
// after the short-sentence overload runs). So once no answer has been late for kMarginQuiet,
// a margin above 1 also relaxes towards 1 with answers in time, its logarithm halving every
// kMarginHalfLife; at steady overload some answer is late far more often than that.
//
// Lateness comes in bursts: the sentences admitted in the same few hundred milliseconds are late
// together, so one burst takes the margin near its top, and answers in time then walk it down at
// a steady pace, past the margin the burst was admitted at, while the queue refills to where the
// next burst finds it (short sentences at 1.2x capacity, session 24: the margin cycled 2.5 ->
// 0.7 every 4-6 s, the sentences in flight 130 -> 430, admitted p99 1.03-1.16 s). So a late
// sentence leaves a mark, the pod's (ipc::SharedMargin): kMarkHeadroom times the margin it was
// admitted at, and the sentences in flight it was admitted with. While at least kMarkLoad of
// those are in flight, admission applies at least the mark, which fades to the margin's floor
// with a time constant of SharedMargin::kMarkFadeUs (30 s); a later late sentence admitted at
// a higher margin moves it up, from its own load, or, within the same burst (a mark set less
// than an objective before), from the burst's fewest in flight. At lighter loads it does not
// apply: after an overload, what the engine serves in time at capacity is not refused for it.
// (At 1.2x, with the mark the sentences in flight held at 250-330 between rarer bursts: admitted
// p99 0.99-1.01 s over three 30 s runs against 1.03-1.14 without it, goodput alike; and the
// admission bench's admitted p99 came under 1 s in every cell and length bucket, against six
// cells over it before. The burst's least load: a flood is admitted at growing loads and
// margins, and its late sentences are counted in that order; a mark moved up to the last one's
// load, ~730 in flight after a closed loop of 1,024 began, left the loads from ~530 to the margin,
// which answers in time walked down until ~100 more came late from ~600 in flight, 4 s later;
// from the least load the second burst was 1-11 late answers, session 30.)
//
// What refusals cannot do: nothing learned depends on refusals or on the arrival rate, only on
// the sentences that finished, so a flood of refused calls cannot talk the estimate down (before
// this design the estimate followed completions per second, which fell as refusals took the
// CPU, so refusals fed themselves). A refused call is told when to come back (`retry_after`, the
// grpc-retry-pushback-ms trailer): about the time the sentences ahead of it need to leave enough
// room, spread by ±50% so that a crowd told at once does not return at once.
//
// A whole text's sentences are admitted together or not at all: they run side by side in the
// engine, so the text's time is that of its longest sentence in a batch grown by all of them,
// (longest output + 1 + queued) * step(n + k) for k sentences, and a text admitted sentence by
// sentence could be cut in the middle under load — its first sentences taking the engine's time
// for an answer that then fails.
//
// A sentence (or text) with nothing ahead is always admitted, so the estimate keeps being
// measured however slow one sentence is, and a text with more sentences than
// server.max_in_flight is still answered when the worker is idle; idle time counts for nothing.
// Until a first completion nothing predicts, so at most kStartWindow are admitted (kNoEstimate
// beyond): a flood at start-up, all admitted, would run in one batch whose steps last for seconds,
// and miss the objective for everyone. With no completions (an engine that stopped answering)
// nothing learned moves, so admission stops once the in-flight count alone predicts the budget is
// spent. Each worker measures its own sentences against its own share of the engine, but the
// margin is the pod's (Options::shared_margin, ipc::SharedMargin): the workers' sentences share
// one engine, and a worker whose answers dried up could not steer a margin of its own down
// again. Thread-safe.
class AdmissionController {
 public:
  // Monotonic time in microseconds; tests pass a fake.
  using Clock = std::function<int64_t()>;
  static constexpr std::chrono::microseconds kNoDeadline = std::chrono::microseconds::max();
  // Sentences admitted at most before the first answer (or max_in_flight, if smaller).
  static constexpr int kStartWindow = 32;

  struct Options {
    int max_in_flight = 1024;             // server.max_in_flight
    std::chrono::milliseconds slo{1000};  // server.slo_p99_ms
    // The smoothing time constant (busy time) of what is learned.
    std::chrono::milliseconds smoothing{1000};
    // engine.max_batch_size: beyond it, sentences wait in the engine for others to leave.
    int max_batch_size = 128;
    // The engine's step time and the other workers' sentences, read on every decision; null
    // (or a load that is not known()): the own-flight model above.
    std::function<EngineLoad()> engine_load;
    // Told this worker's in-flight count on every change, under the controller's lock; may be
    // null.
    std::function<void(int)> publish_in_flight;
    // The margin shared with the other workers of the pod (ipc::SharedMargin, in the shared
    // segment); null: the controller's own.
    ipc::SharedMargin* shared_margin = nullptr;
  };

  // kNoEstimate: kStartWindow in flight before a first answer; the caller may let it wait for
  // that answer (worker/waiting_room.h) rather than refuse it.
  enum class Refusal { kNone, kMaxInFlight, kSlo, kDeadline, kNoEstimate };
  // kInteractive: admitted while predicted within the objective (or its deadline, if sooner).
  // kBatch: admitted only while predicted within kBatchShare of the objective, so that batch
  // work fills what interactive work leaves and interactive arrivals still find room; its own
  // deadline is the caller's to keep (it waits for room, worker/waiting_room.h).
  enum class Priority { kInteractive, kBatch };
  static constexpr double kBatchShare = 0.75;
  // The margin's range (ipc::SharedMargin).
  static constexpr double kMinMargin = ipc::SharedMargin::kMin;
  static constexpr double kMaxMargin = ipc::SharedMargin::kMax;
  // The late mark (see above): how far above the margin a late sentence was admitted at, and
  // from what share of the sentences in flight it was admitted with, it applies.
  static constexpr double kMarkHeadroom = 1.35;
  static constexpr double kMarkLoad = 0.85;
  static constexpr std::chrono::seconds kMarginQuiet{20};
  // ... or once this many answers in a row came in time, pod-wide (three times the run between
  // two late answers at kLateShare): a pod answering 400 a second is quiet after 1.5 s, and a
  // load test's trial at capacity right after an overloaded one is no longer refused at the
  // margin the overload left (session 21: 9-16% refused at a rate a settled daemon served
  // without one).
  static constexpr int kQuietAnswers = 600;
  static constexpr std::chrono::seconds kMarginHalfLife{4};
  // What Release needs of an admitted sentence.
  struct Ticket {
    int64_t admitted_us = 0;  // the clock's time at admission
    double held_us = 0;       // the worker's sentence-microseconds in flight until then
    size_t text_bytes = 0;    // the request's text
    double predicted_us = 0;  // the predicted time in the server; 0 when there was none
    double budget_us = 0;     // what it was admitted against (objective or deadline)
    // Names it among the sentences watched for running past their budget (see
    // CountOverdue); 0: not watched (no prediction).
    uint64_t watch = 0;
    int64_t due_us = 0;  // admitted_us + budget_us
    int ahead = 0;       // sentences in flight in the pod when it was admitted, itself included
    double margin = 0;   // the margin it was admitted at
  };
  struct Decision {
    Refusal refusal = Refusal::kNone;
    std::string message;  // why, for the client; empty when admitted
    // When refused for time: how long the client should wait before it tries again.
    std::chrono::milliseconds retry_after{0};
    std::vector<Ticket> tickets;  // when admitted: one per sentence, in order
    bool admitted() const { return refusal == Refusal::kNone; }
  };

  AdmissionController(Options options, Clock clock);

  // Admits the sentences of one text, of `sentence_bytes` bytes each (at least one), whose
  // deadline is `budget` from now (kNoDeadline: none) and whose outputs are capped at
  // `max_output_tokens` (0: no cap), all of them, counting them in flight, or none, saying why
  // not. Every admitted sentence must be Released once, with its ticket.
  Decision Admit(std::chrono::microseconds budget, std::span<const size_t> sentence_bytes,
                 int max_output_tokens = 0, Priority priority = Priority::kInteractive)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One sentence.
  Decision Admit(std::chrono::microseconds budget, size_t text_bytes, int max_output_tokens = 0,
                 Priority priority = Priority::kInteractive) ABSL_LOCKS_EXCLUDED(mu_) {
    return Admit(budget, std::span<const size_t>(&text_bytes, 1), max_output_tokens, priority);
  }
  // Release's output_tokens for a sentence cancelled because its deadline passed.
  static constexpr int kMissedDeadline = -2;
  // An admitted sentence left. `output_tokens` is what the engine generated for an answered
  // sentence, which teaches the estimates; kMissedDeadline for one cancelled at its deadline,
  // which teaches no time (its own is only known to exceed its budget) but was late, and moves
  // the margin as a late answer does; any other negative value for one that failed or was
  // cancelled otherwise, which only leaves. Without the deadline's case a deadline at or below
  // the objective turns every late sentence into a cancelled one: the margin then sees only
  // answers in time and sinks to kMinMargin while a third of what it admits misses (admission
  // bench, 2026-12-03: short sentences at 2x with 1 s deadlines, 581 of 1,662 admitted).
  // Returns an answered sentence's time in the server over its prediction, 0 when there was
  // none.
  double Release(const Ticket& ticket, int output_tokens) ABSL_LOCKS_EXCLUDED(mu_);

  int in_flight() const ABSL_LOCKS_EXCLUDED(mu_);
  // The predicted time in the server of a sentence of `text_bytes` admitted now, with the
  // margin for the spread of predictions applied; 0 until the first completion.
  std::chrono::microseconds PredictedTime(size_t text_bytes) const ABSL_LOCKS_EXCLUDED(mu_);
  // What is learned, for metrics and tests: seconds per step per sentence in flight, predicted
  // output tokens per text byte, and the margin applied to predictions (kMinMargin..kMaxMargin).
  double step_seconds_per_sentence() const ABSL_LOCKS_EXCLUDED(mu_);
  double output_tokens_per_byte() const ABSL_LOCKS_EXCLUDED(mu_);
  double margin() const;

 private:
  // A sum whose weights decay exponentially with busy time.
  struct DecayingSum {
    double sum = 0;
    double weight = 0;
    void Decay(double factor) {
      sum *= factor;
      weight *= factor;
    }
    void Add(double value, double w = 1) {
      sum += value;
      weight += w;
    }
    double Ratio() const { return weight > 0 ? sum / weight : 0; }
  };

  // The step-time model one decision uses: the engine's, or the own-flight one.
  struct StepModel {
    double fixed_us = 0;
    double per_sequence_us = 0;  // theta in the own-flight model
    int others = 0;              // sentences in flight besides this worker's
    int max_batch = 0;           // beyond it, sentences queue; 0: no limit
    double tokens_per_step = 1;  // output tokens a sequence gains per step
    double StepUs(int batch) const { return fixed_us + per_sequence_us * batch; }
    // The steps a sentence of `output` tokens runs for (the first step prefills).
    double Steps(double output) const { return output / tokens_per_step + 1; }
    int Batch(int in_flight) const {
      return max_batch > 0 ? std::min(in_flight, max_batch) : in_flight;
    }
  };
  StepModel Model() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts the busy time since the last event, and the sentences held over it.
  void Advance(int64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The predicted time in µs of a sentence with `output` tokens to generate admitted with
  // `ahead` sentences in flight and `along` - 1 others of its text, without the margin; 0 until
  // a step time is known.
  double PredictUs(const StepModel& model, int ahead, double output, int along = 1) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Its output tokens.
  double PredictOutput(size_t text_bytes, int max_output_tokens) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the margin by one admitted sentence that was (or was not) late for its budget.
  void SteerMargin(bool late, int64_t now_us);
  // Counts as late, once, each watched sentence still unanswered past its budget: a margin
  // that learns of lateness only from answers learns it a budget too late. At the start of a
  // flood (closed loop of 1,024 after one of 64), what was admitted in its first second ran
  // 2-3 s (the refusals' CPU slowed the engine's steps) and admission kept admitting as
  // before until those answers came (first second of the window: p50 2.1 s, session 20).
  void CountOverdue(int64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops watching `ticket`; whether it was still watched (not yet counted late).
  bool Unwatch(const Ticket& ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the margin for a sentence that was late, and leaves its mark.
  void Late(const Ticket& ticket, int64_t now_us);
  // The least margin the late mark asks of a decision with `in_flight` sentences in flight
  // (itself included); 0 when none.
  double MarkedMargin(int64_t now_us, int in_flight) const;
  // `us` microseconds spread by ±50%, as a retry-after within its bounds.
  std::chrono::milliseconds Jittered(double us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Clock clock_;
  mutable Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // The most sentences in flight that answers in time were admitted with, decaying over
  // kSeenAheadMemoryUs since seen_ahead_us_ (see kBeyondSeen).
  double seen_ahead_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seen_ahead_us_ ABSL_GUARDED_BY(mu_) = 0;
  double SeenAheadAt(int64_t now_us) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admitted sentences with a prediction, unanswered and not yet counted late, by due time.
  std::map<std::pair<int64_t, uint64_t>, Ticket> watched_ ABSL_GUARDED_BY(mu_);
  uint64_t last_watch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_event_us_ ABSL_GUARDED_BY(mu_) = 0;
  // the integral of in_flight_ over time (sentence-µs)
  double held_us_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t busy_since_release_us_ ABSL_GUARDED_BY(mu_) = 0;
  // time in the server (µs) over (output + 1) * mean in flight: theta
  DecayingSum step_us_ ABSL_GUARDED_BY(mu_);
  DecayingSum output_per_byte_ ABSL_GUARDED_BY(mu_);  // output tokens over text bytes
  DecayingSum output_ ABSL_GUARDED_BY(mu_);           // output tokens per sentence
  // Steered by late answers (see above); atomics, not guarded: other workers' controllers
  // update a shared one.
  ipc::SharedMargin own_margin_;
  ipc::SharedMargin* const margin_cell_;
  uint64_t jitter_state_ ABSL_GUARDED_BY(mu_) = 0x9e3779b97f4a7c15ull;
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_ADMISSION_H_
