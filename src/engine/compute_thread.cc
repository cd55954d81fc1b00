#include "engine/compute_thread.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace gecd::engine {

ComputeThread::ComputeThread(Backend* backend) : backend_(backend), thread_([this] { Run(); }) {}

ComputeThread::~ComputeThread() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

std::string ComputeThread::Summary() {
  MutexLock lock(&mu_);
  return absl::StrFormat(
      "%d steps, %.3f s computing, %.3f s idle between back-to-back steps (%.1f us a step)", steps_,
      busy_ns_ * 1e-9, gap_ns_ * 1e-9, back_to_back_ == 0 ? 0.0 : gap_ns_ * 1e-3 / back_to_back_);
}

void ComputeThread::Dispatch(const StepBatch* batch, StepResult* result, bool back_to_back) {
  {
    MutexLock lock(&mu_);
    batch_ = batch;
    result_ = result;
    if (back_to_back) {
      gap_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - finished_at_)
                     .count();
      ++back_to_back_;
    }
  }
  cv_.SignalAll();
}

absl::Status ComputeThread::Wait() {
  MutexLock lock(&mu_);
  while (batch_ != nullptr) cv_.Wait(&mu_);
  return status_;
}

void ComputeThread::Run() {
  mu_.Lock();
  for (;;) {
    while (!stop_ && batch_ == nullptr) cv_.Wait(&mu_);
    if (batch_ == nullptr) break;  // stopping, nothing in flight
    const StepBatch* batch = batch_;
    StepResult* result = result_;
    mu_.Unlock();
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = backend_->Forward(*batch, result);
    const auto end = std::chrono::steady_clock::now();
    mu_.Lock();
    status_ = std::move(status);
    busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
    ++steps_;
    finished_at_ = end;
    batch_ = nullptr;
    cv_.SignalAll();
  }
  mu_.Unlock();
}

}  // namespace gecd::engine
