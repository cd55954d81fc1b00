#ifndef GECD_ENGINE_COMPUTE_THREAD_H_
#define GECD_ENGINE_COMPUTE_THREAD_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
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
  void Dispatch(const StepBatch* batch, StepResult* result, bool back_to_back);

  // Blocks until the dispatched step is done; its status.
  absl::Status Wait();

  // Steps run, time computing, and time idle between back-to-back steps, in words.
  std::string Summary();

 private:
  void Run();

  Backend* const backend_;
  std::mutex mu_;
  std::condition_variable cv_;
  const StepBatch* batch_ = nullptr;  // the step to run or running; null when idle
  StepResult* result_ = nullptr;
  absl::Status status_;
  bool stop_ = false;
  std::chrono::steady_clock::time_point finished_at_;
  int64_t steps_ = 0;
  int64_t back_to_back_ = 0;
  int64_t busy_ns_ = 0;
  int64_t gap_ns_ = 0;
  std::thread thread_;  // last: starts once everything above is initialised
};

}  // namespace gecd::engine

#endif  // GECD_ENGINE_COMPUTE_THREAD_H_
