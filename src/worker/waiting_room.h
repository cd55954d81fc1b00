#ifndef GECD_WORKER_WAITING_ROOM_H_
#define GECD_WORKER_WAITING_ROOM_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"

// A worker's waiting room: sentences that wait, up to their deadline, instead of being refused
// at once. The batch priority class waits here for the capacity interactive sentences leave;
// and any sentence that arrives while admission has nothing to predict from (before a daemon's
// first answer, beyond AdmissionController::kStartWindow) waits for the first answer.
namespace gecd::worker {

// Owns the waiting sentences, first come first served, and the thread that starts them: each
// time room may have appeared (Poke: a sentence left the engine) and at least every
// `retry_every`, it offers the oldest its start, then the next, until one must go on waiting.
// Starting runs the caller's code on that thread (admission, then handing the sentence to its
// start, or its refusal), so waiting sentences never take a gRPC thread. A
// waiting sentence leaves without starting when cancelled (its deadline, the client), when the
// queue closes, or, on arrival, when the room is full: each such sentence is answered through its
// `fail` exactly once, never inline in Push. Thread-safe.
class WaitingRoom {
 public:
  struct Waiting {
    uint64_t id = 0;
    // Starts the sentence if admission lets it, or answers it (a refusal now that admission
    // can predict); false, having done nothing, when it must go on waiting.
    std::function<bool()> try_start;
    // Answers the sentence that will never start, with why.
    std::function<void(absl::Status)> fail;
  };

  // `capacity`: sentences that may wait at once; beyond it arrivals fail RESOURCE_EXHAUSTED.
  explicit WaitingRoom(size_t capacity,
                       std::chrono::milliseconds retry_every = std::chrono::milliseconds(50));
  // Fails what still waits with UNAVAILABLE, then stops the thread.
  ~WaitingRoom();
  WaitingRoom(const WaitingRoom&) = delete;
  WaitingRoom& operator=(const WaitingRoom&) = delete;

  // Queues `waiting` behind the others; when the room is full or closed, its `fail` runs on the
  // queue's thread with RESOURCE_EXHAUSTED or UNAVAILABLE.
  void Push(Waiting waiting) ABSL_LOCKS_EXCLUDED(mu_);
  // If `id` is waiting, it leaves and its `fail` runs with `status` (on the caller's thread);
  // true then. False when it is not waiting (started, answered, or unknown).
  bool Cancel(uint64_t id, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Room may have appeared.
  void Poke() ABSL_LOCKS_EXCLUDED(mu_);
  // From now on nothing starts: what waits and what arrives fails with `status`.
  void Close(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  size_t waiting() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const size_t capacity_;
  const std::chrono::milliseconds retry_every_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  // arrivals over capacity, or after Close, to be failed by the thread
  std::deque<std::pair<Waiting, absl::Status>> rejected_ ABSL_GUARDED_BY(mu_);
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // not OK once closed
  // the id whose try_start is running, and a cancel that came meanwhile (not OK): if it finds
  // no room it is answered with that instead of waiting again
  uint64_t starting_ ABSL_GUARDED_BY(mu_) = 0;
  bool has_starting_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status cancel_while_starting_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_WAITING_ROOM_H_
