#include "worker/refusal_pacer.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace gecd::worker {

namespace {
// How far back the admission rate looks (its time constant).
constexpr double kRateWindowSeconds = 1.0;
}  // namespace

RefusalPacer::RefusalPacer(double max_per_second, int burst, double per_admitted,
                           double floor_per_second)
    : max_per_second_(std::max(max_per_second, 0.0)),
      burst_(std::max(burst, 1)),
      per_admitted_(std::max(per_admitted, 0.0)),
      floor_per_second_(std::clamp(floor_per_second, 0.0, max_per_second_)) {
  if (max_per_second_ > 0) thread_ = std::thread([this] { Loop(); });
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
  if (max_per_second_ == 0) {
    answer();
    return;
  }
  const Clock::time_point now = Clock::now();
  {
    MutexLock lock(&mu_);
    const double allowance = AllowanceAt(now);
    const auto interval =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / allowance));
    next_ = std::max(next_, now);
    const Clock::time_point due = next_ + interval - interval * burst_;
    next_ += interval;
    if (due > now && !stopping_) {
      held_.push_back({due, std::move(answer)});
      if (held_.size() == 1) cv_.Signal();
      return;
    }
  }
  answer();
}

void RefusalPacer::Admitted() {
  if (per_admitted_ == 0) return;
  const Clock::time_point now = Clock::now();
  MutexLock lock(&mu_);
  const double age = std::chrono::duration<double>(now - admitted_at_).count();
  admitted_rate_ = admitted_rate_ * std::exp(-age / kRateWindowSeconds) + 1.0 / kRateWindowSeconds;
  admitted_at_ = now;
}

double RefusalPacer::allowance() const {
  MutexLock lock(&mu_);
  return AllowanceAt(Clock::now());
}

double RefusalPacer::AllowanceAt(Clock::time_point now) const {
  if (per_admitted_ == 0) return max_per_second_;
  const double age = std::chrono::duration<double>(now - admitted_at_).count();
  const double rate = admitted_rate_ * std::exp(-age / kRateWindowSeconds);
  return std::min(max_per_second_, std::max({per_admitted_ * rate, floor_per_second_, 1.0}));
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
