#ifndef GECD_WORKER_REFUSAL_PACER_H_
#define GECD_WORKER_REFUSAL_PACER_H_

#include <chrono>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

// Paces a worker's refusals so that clients which re-send a refusal at once cannot turn the
// worker's CPU, and the engine's, into a refusal loop.
namespace gecd::worker {

// Owns the refusals waiting to be sent and the thread that sends them. Each refusal costs a
// gRPC call's worth of CPU in the worker (~40 µs measured) and as much again in a client on the
// same machine; a client that re-sends at once turns every refusal into another, so beyond some
// rate refusals take the CPU that admitted sentences need, the engine slows, admission predicts
// longer and refuses more: the collapse issue 24 measured. Up to `per_second` (with a burst of
// `burst`) refusals are answered at once, inline; beyond it each waits its turn, one every
// 1/per_second, so that a storm of them costs a bounded share of a core and its clients are
// slowed instead. Under ordinary overload (open-loop arrivals at a few times capacity) nothing
// waits. Thread-safe.
class RefusalPacer {
 public:
  // `per_second` 0: no pacing, every refusal at once.
  RefusalPacer(double per_second, int burst);
  // Sends what still waits, at once.
  ~RefusalPacer();
  RefusalPacer(const RefusalPacer&) = delete;
  RefusalPacer& operator=(const RefusalPacer&) = delete;

  // Runs `answer` now (on the caller's thread) if the rate allows, else later on the pacer's.
  void Refuse(std::function<void()> answer) ABSL_LOCKS_EXCLUDED(mu_);
  // Refusals waiting to be sent.
  size_t waiting() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  struct Held {
    Clock::time_point due;
    std::function<void()> answer;
  };
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const Clock::duration interval_;  // zero: unpaced
  const Clock::duration burst_;     // how far ahead of now the schedule may run and still send
  mutable Mutex mu_;
  CondVar cv_;
  // The theoretical time of the next refusal (GCRA): each one sent moves it interval_ on.
  Clock::time_point next_ ABSL_GUARDED_BY(mu_);
  std::deque<Held> held_ ABSL_GUARDED_BY(mu_);  // due times ascending
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_REFUSAL_PACER_H_
