#ifndef GECD_WORKER_START_QUEUE_H_
#define GECD_WORKER_START_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"

// Where admitted sentences are started: their validation, spelling, tokenization and submission
// to the engine run here, off gRPC's threads (spelling.instances of them per worker).
//
// Why: gRPC runs a unary call's handler inline on the thread that read the call from its
// connection, and the next calls on that connection are read only once the handler returns. An
// admitted sentence's start (~0.5 ms of CPU, several ms when the engine holds the cores) held up
// the calls behind it, refusals included: under 2x overload on this project's 2-core box, a
// refusal's p99 was 36-48 ms, 35-48 of it between the client's send and the handler's start
// (session 25, bench/RESULTS.md). Handed here, the handler returns after admission.
namespace gecd::worker {

// Owns the admitted sentences not yet started and the threads that start them, in the order
// they came (with one thread, one after the other; with more, the next free one takes the
// oldest). A queued sentence leaves without starting when cancelled (its deadline, the client);
// each one either starts or is answered through its `fail`, exactly once. Thread-safe.
class StartQueue {
 public:
  struct Pending {
    uint64_t id = 0;
    // Validates, spells, tokenizes and submits the sentence, or answers it.
    std::function<void()> start;
    // Answers the sentence that will not start, with why.
    std::function<void(absl::Status)> fail;
  };

  // `threads` >= 1: how many sentences start at once (the worker uses spelling.instances, the
  // spelling stage's look-ups at once).
  explicit StartQueue(int threads = 1);
  // Stop()s.
  ~StartQueue();
  StartQueue(const StartQueue&) = delete;
  StartQueue& operator=(const StartQueue&) = delete;

  // Queues `pending` behind the others; its `start` runs on one of the queue's threads (on the
  // caller's after Stop).
  void Push(Pending pending) ABSL_LOCKS_EXCLUDED(mu_);
  // If `id` is queued, it leaves and its `fail` runs with `status` (on the caller's thread);
  // true then. False when it is not queued (started, or unknown).
  bool Cancel(uint64_t id, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts what is queued, then ends the threads: nothing pushed afterwards runs on them. The
  // owner calls it before what the starts use goes away; not concurrently with itself.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int running_threads_ ABSL_GUARDED_BY(mu_) = 0;  // 0 once stopping and every thread has ended
  std::vector<std::thread> threads_;
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_START_QUEUE_H_
