#ifndef GECD_WORKER_REFUSAL_PACER_H_
#define GECD_WORKER_REFUSAL_PACER_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

// Paces a worker's refusals so that clients which re-send a refusal at once cannot turn the
// worker's CPU, and the engine's, into a refusal loop.
namespace gecd::worker {

// Owns the refusals waiting to be sent and the thread that sends them. Each refusal costs a
// gRPC call's worth of CPU in the worker (~40 µs on a quiet box, 300-400 µs per call measured
// on a 2-core box in a refusal storm) and as much again in a client on the same machine; a
// client that re-sends at once turns every refusal into another, so beyond some rate refusals
// take the CPU that admitted sentences need, the engine slows, admission predicts longer and
// refuses more: the collapse issue 24 measured. Refusals within the allowance (with a burst of
// `burst`) are answered at once, inline; beyond it each waits its turn, in order.
//
// The allowance is `max_per_second`, or with `per_admitted` > 0, that many refusals per
// sentence the worker admits (a rate over about the last `rate_window`; at least
// `floor_per_second` and one, at most `max_per_second`): what refusals may cost then scales with
// the work the pod does. A
// fixed 1,000 a second per worker let closed loops of 64 clients that re-send at once, on a
// 2-core box, spend a core on refusals and leave the engine 60% of its CPU (admitted p99 3 s,
// session 14).
//
// Holding a refusal saves CPU only when its client would have re-sent it at once; the calls of
// an open loop come whatever the pacer does, so holding theirs only makes them late (refusal p99
// 1.4 s at 3x overload in an open loop with the allowance alone, session 18). The two cannot be
// told apart by the call, but by the queue: with `max_wait` > 0, a refusal beyond the allowance
// waits at most max_wait, so an open loop, whose arrivals do not wait for answers, keeps about
// rate * max_wait waiting (a couple at 3x overload); clients that re-send at once come back
// within a round trip, so they pile up. Once `storm_held` wait, the pacer is in a storm: then
// refusals wait for the allowance however long that takes (a storm's clients are slowed to it),
// until the queue is down to a quarter of storm_held. max_wait 0: always so. Thread-safe.
class RefusalPacer {
 public:
  struct Options {
    double max_per_second = 0;  // 0: no pacing, every refusal at once
    int burst = 1;
    double per_admitted = 0;
    double floor_per_second = 0;
    std::chrono::milliseconds rate_window{1000};
    std::chrono::microseconds max_wait{0};
    size_t storm_held = 0;
  };
  explicit RefusalPacer(Options options);
  // Sends what still waits, at once.
  ~RefusalPacer();
  RefusalPacer(const RefusalPacer&) = delete;
  RefusalPacer& operator=(const RefusalPacer&) = delete;

  // Runs `answer` now (on the caller's thread) if the allowance allows, else later on the
  // pacer's.
  void Refuse(std::function<void()> answer) ABSL_LOCKS_EXCLUDED(mu_);
  // The worker admitted a sentence (counts towards the allowance with `per_admitted`).
  void Admitted() ABSL_LOCKS_EXCLUDED(mu_);
  // Refusals waiting to be sent.
  size_t waiting() const ABSL_LOCKS_EXCLUDED(mu_);
  // Refusals a second answered at once now.
  double allowance() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether refusals now wait for the allowance however long (see above).
  bool in_storm() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  struct Held {
    std::function<void()> answer;
    Clock::time_point since;
  };
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // Adds what the allowance gave since the last refill, up to the burst.
  void Refill(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double AllowanceAt(Clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Storm() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return options_.max_wait.count() == 0 || storm_;
  }

  const Options options_;
  mutable Mutex mu_;
  CondVar cv_;
  // A token bucket filled at the allowance of the moment, so that a change of allowance takes
  // effect at once: refusals answered at once take a token each.
  double tokens_ ABSL_GUARDED_BY(mu_);
  Clock::time_point filled_at_ ABSL_GUARDED_BY(mu_);
  // Admissions a second, decaying over about rate_window since admitted_at_.
  double admitted_rate_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point admitted_at_ ABSL_GUARDED_BY(mu_);
  std::deque<Held> held_ ABSL_GUARDED_BY(mu_);  // first come first
  bool storm_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_REFUSAL_PACER_H_
