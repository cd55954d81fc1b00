#ifndef GECD_WORKER_ADMISSION_H_
#define GECD_WORKER_ADMISSION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

// Deadline-aware admission for one worker: a sentence is refused at once (RESOURCE_EXHAUSTED)
// when the worker could not answer it in time, instead of queueing it until its deadline.
namespace gecd::server {

// Owns the worker's count of admitted-but-unfinished sentences and the rate at which it finishes
// them, and decides on each arrival. The predicted wait of a new sentence is in_flight / rate:
// the time until the sentences ahead of it have finished.
//
// The rate is Little's law over the sentences that finished, rate = L / W: W how long one took
// from admission to release, L how many the worker held on average meanwhile, each smoothed over
// the completions of the last second or so of busy time. The engine batches, so the sentences
// in flight finish together, not one after another: a rate counted from completions per second
// lags every rise in load by a whole response time, and is lowest after a cold start (one
// completion over the first sentence's latency, while all the others ran alongside it), so
// refusing on it kept the load low, and the completions measured at that load confirmed it.
// L / W is right from the first completion. (Under an overload from the start, the first
// completions also count the queue that grew behind them, so for a second or two up to about
// twice max_queue may be admitted.) Without completions (an engine that stopped answering)
// nothing moves, so about max_queue of sentences at the last rate are admitted and no more. A
// sentence with nothing ahead is always admitted, so W keeps being measured however slow one
// sentence is. Idle time counts for nothing. The engine is shared by all workers, so each worker
// measures its own share of the engine's throughput, and its own queue against it. Until a first
// completion only max_in_flight applies. Thread-safe.
class AdmissionController {
 public:
  // Monotonic time in microseconds; tests pass a fake.
  using Clock = std::function<int64_t()>;
  static constexpr std::chrono::microseconds kNoDeadline = std::chrono::microseconds::max();

  struct Options {
    int max_in_flight = 1024;                  // server.max_in_flight
    std::chrono::milliseconds max_queue{500};  // server.max_queue_ms; 0 = only the deadline
    // The smoothing time constant (busy time) of L and W.
    std::chrono::milliseconds smoothing{1000};
  };

  enum class Refusal { kNone, kMaxInFlight, kMaxQueue, kDeadline };
  // What Release needs of an admitted sentence.
  struct Ticket {
    int64_t admitted_us = 0;  // the clock's time at admission
    double held_us = 0;       // the worker's sentence-microseconds in flight until then
  };
  struct Decision {
    Refusal refusal = Refusal::kNone;
    std::string message;  // why, for the client; empty when admitted
    Ticket ticket;        // when admitted
    bool admitted() const { return refusal == Refusal::kNone; }
  };

  AdmissionController(Options options, Clock clock);

  // Admits one sentence whose deadline is `budget` from now (kNoDeadline: none), counting it in
  // flight, or says why not. Every admitted sentence must be Released once, with its ticket.
  Decision Admit(std::chrono::microseconds budget) ABSL_LOCKS_EXCLUDED(mu_);
  // An admitted sentence left the engine (answered or failed): one completion.
  void Release(const Ticket& ticket) ABSL_LOCKS_EXCLUDED(mu_);

  int in_flight() const ABSL_LOCKS_EXCLUDED(mu_);
  // The rate the predictions assume (L / W, per second); 0 until the first completion.
  double service_rate() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A mean of one value per completion whose weights decay exponentially with busy time; no
  // prior, so the first value is the mean.
  struct DecayingMean {
    double sum = 0;
    double weight = 0;
    void Decay(double factor) {
      sum *= factor;
      weight *= factor;
    }
    void Add(double value) {
      sum += value;
      weight += 1;
    }
  };

  // Counts the busy time since the last event, and the sentences held over it.
  void Advance(int64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // L / W; 0 until the first completion.
  double Rate() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Clock clock_;
  mutable Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_event_us_ ABSL_GUARDED_BY(mu_) = 0;
  // the integral of in_flight_ over time (sentence-µs)
  double held_us_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t busy_since_release_us_ ABSL_GUARDED_BY(mu_) = 0;
  // L: sentences held during each finished one's stay
  DecayingMean in_flight_mean_ ABSL_GUARDED_BY(mu_);
  DecayingMean sojourn_mean_ ABSL_GUARDED_BY(mu_);  // W: each finished one's stay, seconds
};

}  // namespace gecd::server

#endif  // GECD_WORKER_ADMISSION_H_
