#ifndef GECD_ENGINE_COMPUTE_THREAD_H_
#define GECD_ENGINE_COMPUTE_THREAD_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "engine/backend.h"

namespace gecd::engine {

// Runs Backend::Forward on a thread of its own, one step at a time, so the caller can commit
// step N and do its I/O while step N+1 computes. Counts the time the backend spends computing
// and the time it waits between back-to-back steps (the caller's share of the critical path).
// Owns the thread; the destructor finishes the step in flight.
class ComputeThread {
 public:
  explicit ComputeThread(Backend* backend);
  ComputeThread(const ComputeThread&) = delete;
  ComputeThread& operator=(const ComputeThread&) = delete;
  ~ComputeThread();

  // Starts Forward(*batch, result); both must stay untouched until Wait() returns. At most one
  // step is in flight. `back_to_back`: the previous step has just finished and this one was
  // ready for it, so the time in between counts as the backend waiting for the host.
  void Dispatch(const StepBatch* batch, StepResult* result, bool back_to_back)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until the dispatched step is done; its status.
  absl::Status Wait() ABSL_LOCKS_EXCLUDED(mu_);

  // Steps run, time computing, and time idle between back-to-back steps, in words.
  std::string Summary() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  Backend* const backend_;
  Mutex mu_;
  CondVar cv_;  // signalled when a step is dispatched or finished, and on stopping
  // the step to run or running; null when idle
  const StepBatch* batch_ ABSL_GUARDED_BY(mu_) = nullptr;
  StepResult* result_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point finished_at_ ABSL_GUARDED_BY(mu_);
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t back_to_back_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t busy_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t gap_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once everything above is initialised
};

}  // namespace gecd::engine

#endif  // GECD_ENGINE_COMPUTE_THREAD_H_
