#include "worker/start_queue.h"

#include <algorithm>
#include <utility>

namespace gecd::worker {

StartQueue::StartQueue(int threads) {
  threads = std::max(threads, 1);
  {
    MutexLock lock(&mu_);
    running_threads_ = threads;
  }
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

StartQueue::~StartQueue() { Stop(); }

void StartQueue::Push(Pending pending) {
  {
    MutexLock lock(&mu_);
    if (running_threads_ > 0) {
      queue_.push_back(std::move(pending));
      cv_.Signal();
      return;
    }
  }
  pending.start();
}

bool StartQueue::Cancel(uint64_t id, absl::Status status) {
  Pending cancelled;
  {
    MutexLock lock(&mu_);
    auto it = queue_.begin();
    while (it != queue_.end() && it->id != id) ++it;
    if (it == queue_.end()) return false;
    cancelled = std::move(*it);
    queue_.erase(it);
  }
  cancelled.fail(std::move(status));
  return true;
}

void StartQueue::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

size_t StartQueue::queued() const {
  MutexLock lock(&mu_);
  return queue_.size();
}

void StartQueue::Loop() {
  mu_.Lock();
  while (true) {
    while (!stopping_ && queue_.empty()) cv_.Wait(&mu_);
    if (queue_.empty()) break;  // stopping, and everything queued has started
    Pending next = std::move(queue_.front());
    queue_.pop_front();
    // Outside the lock: a start may cancel another sentence of its text (Cancel).
    mu_.Unlock();
    next.start();
    mu_.Lock();
  }
  // The last thread out: a later Push starts its sentence on the caller's thread. Until then
  // the ones still running start whatever is pushed.
  --running_threads_;
  mu_.Unlock();
}

}  // namespace gecd::worker
