#include "worker/refusal_pacer.h"

#include <algorithm>
#include <utility>

namespace gecd::worker {

RefusalPacer::RefusalPacer(double per_second, int burst)
    : interval_(per_second > 0 ? std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(1.0 / per_second))
                               : Clock::duration::zero()),
      burst_(interval_ * std::max(burst, 1)) {
  if (interval_ > Clock::duration::zero()) thread_ = std::thread([this] { Loop(); });
}

RefusalPacer::~RefusalPacer() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

void RefusalPacer::Refuse(std::function<void()> answer) {
  if (interval_ == Clock::duration::zero()) {
    answer();
    return;
  }
  const Clock::time_point now = Clock::now();
  {
    MutexLock lock(&mu_);
    next_ = std::max(next_, now);
    const Clock::time_point due = next_ + interval_ - burst_;
    next_ += interval_;
    if (due > now && !stopping_) {
      held_.push_back({due, std::move(answer)});
      if (held_.size() == 1) cv_.Signal();
      return;
    }
  }
  answer();
}

size_t RefusalPacer::waiting() const {
  MutexLock lock(&mu_);
  return held_.size();
}

void RefusalPacer::Loop() {
  mu_.Lock();
  while (true) {
    if (held_.empty()) {
      if (stopping_) break;
      cv_.Wait(&mu_);
      continue;
    }
    const Clock::time_point now = Clock::now();
    if (!stopping_ && held_.front().due > now) {
      cv_.WaitWithTimeout(&mu_, held_.front().due - now);
      continue;
    }
    std::function<void()> answer = std::move(held_.front().answer);
    held_.pop_front();
    mu_.Unlock();
    answer();
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace gecd::worker
