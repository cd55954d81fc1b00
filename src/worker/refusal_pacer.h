#ifndef GECD_WORKER_REFUSAL_PACER_H_
#define GECD_WORKER_REFUSAL_PACER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
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
// within a round trip, so they pile up, and keep piling up. An arrival that finds storm_held - 1
// or more waiting is crowded, and once crowded arrivals over about the last kCrowdedWindow reach
// kCrowdedInStorm * storm_held (a decaying count), the pacer is in a storm: then refusals wait
// for the allowance however long that takes (a storm's clients are slowed to it), until the
// queue is down to a quarter of storm_held. One crowd is not enough: a worker whose threads
// were descheduled for tens of ms on a busy box finds an open loop's arrivals of that time
// waiting together, and with a storm begun at the first 16 waiting, this happened about once a
// second at 3x overload on JFLEG (refusal p99 ~0.9 s, session 20), while clients that re-send
// at once crowd the pacer thousands of times a second. max_wait 0: always in a storm.
//
// Three things end a hold early, whatever the allowance:
// - its call's deadline (`due`, given by the caller a little before it): a refusal held past
//   its deadline would reach its client as DEADLINE_EXCEEDED, without the pushback;
// - its call's cancellation (Cancel): a client that went away must not keep a place in the
//   queue; held refusals of cancelled calls once kept the pacer in a storm for seconds after
//   its clients had gone, and an open loop that came next waited behind them (session 19);
// - an open loop in a storm: a closed population's queue stops growing once all of it waits,
//   an open loop's grows as long as it refuses faster than the allowance. With
//   `storm_growth_period` > 0, a storm whose queue grew by storm_held or more in each of
//   kGrowingPeriods successive periods is left (its refusals then wait at most max_wait), and
//   arrivals count as crowded again only once the queue has drained below storm_held. With
//   `admitted_in_flight` the growth counted is that of the queue and the calls admitted in
//   flight together: a closed population moves from one to the other when admission lets fewer
//   in (a late burst's mark), and without it the queue of a closed loop of 1,024 grew for a
//   second, by ~300, as admission came down after the loop's first wave; the storm was left
//   and its clients' refusals spun at once (76% refused in one run of the admission bench,
//   session 30).
//
// In a storm the held refusals go `storm_batch` at a time (at most `burst`), once the allowance
// has filled for them all: the pacer's thread wakes once for them, and their clients' re-sends
// reach the worker's gRPC threads together, which read them in fewer wake-ups. One at a time, a
// held refusal cost ~400 us of a worker's CPU in a closed loop of 1,024 on the 2-core box, where
// an open loop's refusal costs ~150 (session 31).
//
// Outside a storm, once the first in line has waited max_wait, every refusal held then goes
// with it (so some wait less than max_wait): the pacer's thread wakes once for them, not once
// each. At 3x overload in an open loop (short sentences, 2-core box) a worker's CPU a call went
// from ~144 to ~130 us with it (session 31).
//
// Thread-safe. Calls `admitted_in_flight` with its own mutex held: that must not call it.
class RefusalPacer {
 public:
  // Told of the pacer's state, for metrics; called with the pacer's mutex held, so it must be
  // quick and must not call the pacer.
  class Observer {
   public:
    virtual ~Observer() = default;
    // After each change of the refusals waiting or of the storm.
    virtual void Held(size_t held, bool storm) = 0;
    virtual void StormBegun() = 0;
    // A storm was left because its queue kept growing (see above).
    virtual void StormLeftForGrowth() = 0;
  };
  struct Options {
    double max_per_second = 0;  // 0: no pacing, every refusal at once
    int burst = 1;
    double per_admitted = 0;
    double floor_per_second = 0;
    std::chrono::milliseconds rate_window{1000};
    std::chrono::microseconds max_wait{0};
    size_t storm_held = 0;
    std::chrono::milliseconds storm_growth_period{0};  // 0: a storm is never left for growth
    int storm_batch = 1;
    // Sentences the worker has admitted and not yet answered; null: not counted.
    std::function<size_t()> admitted_in_flight = nullptr;
    Observer* observer = nullptr;  // not owned; outlives the pacer
  };
  using Clock = std::chrono::steady_clock;
  // Successive periods of growth that show an open loop in a storm.
  static constexpr int kGrowingPeriods = 4;
  // The time constant of the crowded arrivals' count, and how many storm_held's of them begin
  // a storm. At 3, open loops at 3x overload on the 2-core box (2,400-2,760 req/s, short
  // sentences) went into a storm in 4 of 5 10 s runs, refusal p99 0.75-0.85 s: their arrivals
  // bunch while the engine's steps hold both cores. At 8, in none of 3 (7.2-7.5 ms), while
  // closed loops re-sending at once (1,024 clients, short; 256, JFLEG) were still held: refused
  // 50% and 46% as at 3, goodput alike (session 29).
  static constexpr std::chrono::milliseconds kCrowdedWindow{100};
  static constexpr int kCrowdedInStorm = 8;
  explicit RefusalPacer(Options options);
  // Sends what still waits, at once.
  ~RefusalPacer();
  RefusalPacer(const RefusalPacer&) = delete;
  RefusalPacer& operator=(const RefusalPacer&) = delete;

  // Runs `answer` now (on the caller's thread) if the allowance allows, else later on the
  // pacer's, at the latest at `due`. A nonzero `key` names it for Cancel; keys of refusals
  // waiting together must differ.
  void Refuse(std::function<void()> answer, Clock::time_point due = Clock::time_point::max(),
              uint64_t key = 0) ABSL_LOCKS_EXCLUDED(mu_);
  // The call refused under `key` was cancelled: if its refusal still waits, runs it now, on the
  // caller's thread, without using the allowance. Whether it was waiting.
  bool Cancel(uint64_t key) ABSL_LOCKS_EXCLUDED(mu_);
  // The worker admitted a sentence (counts towards the allowance with `per_admitted`).
  void Admitted() ABSL_LOCKS_EXCLUDED(mu_);
  // Refusals waiting to be sent.
  size_t waiting() const ABSL_LOCKS_EXCLUDED(mu_);
  // Refusals a second answered at once now.
  double allowance() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether refusals now wait for the allowance however long (see above).
  bool in_storm() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Held {
    std::function<void()> answer;
    Clock::time_point since;
    Clock::time_point due;
    uint64_t key;
  };
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // Adds what the allowance gave since the last refill, up to the burst.
  void Refill(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double AllowanceAt(Clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admissions a second at `now`, as the decaying rate has it.
  double AdmittedRateAt(Clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leaves a storm whose queue keeps growing (see above).
  void WatchGrowth(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What WatchGrowth measures: the queue, and the calls admitted in flight if counted.
  size_t Population() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the observer, if any, how many wait and whether in a storm.
  void Notify() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the held refusal `seq` and returns its answer.
  std::function<void()> Take(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // By arrival (seq_ numbers them), with an index by due time (finite ones only) and by key.
  std::map<uint64_t, Held> held_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<Clock::time_point, uint64_t>> dues_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint64_t> seq_of_key_ ABSL_GUARDED_BY(mu_);
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool storm_ ABSL_GUARDED_BY(mu_) = false;
  // Crowded arrivals, decaying over kCrowdedWindow since crowded_at_; not counted after a storm
  // was left for growth until the queue drains below storm_held.
  double crowded_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point crowded_at_ ABSL_GUARDED_BY(mu_);
  bool left_for_growth_ ABSL_GUARDED_BY(mu_) = false;
  // In a storm: when its queue (with the admitted calls in flight) was last measured, how long
  // it was then, and how many successive periods it grew by storm_held or more.
  Clock::time_point measured_at_ ABSL_GUARDED_BY(mu_);
  size_t measured_population_ ABSL_GUARDED_BY(mu_) = 0;
  int growing_periods_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_REFUSAL_PACER_H_
