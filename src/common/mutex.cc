#include "common/mutex.h"

#include <algorithm>

namespace gecd {
namespace {

using Clock = std::chrono::steady_clock;

// now + timeout, without overflowing for "forever".
Clock::time_point DeadlineAfter(std::chrono::nanoseconds timeout) {
  const Clock::time_point now = Clock::now();
  const auto left = Clock::time_point::max() - now;
  return timeout >= left ? Clock::time_point::max()
                         : now + std::chrono::duration_cast<Clock::duration>(timeout);
}

}  // namespace

void Mutex::Unlock() {
  const bool wake = awaiting_ > 0;
  mu_.unlock();
  if (wake) changed_.notify_all();
}

void Mutex::Await(const std::function<bool()>& cond) {
  AwaitWithTimeout(cond, std::chrono::nanoseconds::max());
}

bool Mutex::AwaitWithTimeout(const std::function<bool()>& cond, std::chrono::nanoseconds timeout) {
  const Clock::time_point deadline = DeadlineAfter(timeout);
  ++awaiting_;
  std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
  bool holds = cond();
  // Waiting releases the lock, as Unlock() does: what the caller changed under it may be what
  // another thread awaits. Only before the first wait: the condition only reads.
  if (!holds && awaiting_ > 1) changed_.notify_all();
  while (!holds && Clock::now() < deadline) {
    if (deadline == Clock::time_point::max()) {
      changed_.wait(lock);
    } else {
      changed_.wait_until(lock, deadline);
    }
    holds = cond();
  }
  lock.release();  // still held, by the caller
  --awaiting_;
  return holds;
}

void CondVar::Wait(Mutex* mu) {
  std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
  cv_.wait(lock);
  lock.release();
}

bool CondVar::WaitWithTimeout(Mutex* mu, std::chrono::nanoseconds timeout) {
  std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
  const bool timed_out = cv_.wait_until(lock, DeadlineAfter(timeout)) == std::cv_status::timeout;
  lock.release();
  return timed_out;
}

}  // namespace gecd
