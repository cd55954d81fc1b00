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
      floor_per_second_(std::clamp(floor_per_second, 0.0, max_per_second_)),
      tokens_(burst_),
      filled_at_(Clock::now()) {
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
  {
    MutexLock lock(&mu_);
    Refill(Clock::now());
    // First come, first answered: while some wait, a new one waits behind them.
    if (!stopping_ && (!held_.empty() || tokens_ < 1)) {
      held_.push_back(std::move(answer));
      if (held_.size() == 1) cv_.Signal();
      return;
    }
    tokens_ -= 1;
  }
  answer();
}

void RefusalPacer::Refill(Clock::time_point now) {
  const double elapsed = std::chrono::duration<double>(now - filled_at_).count();
  filled_at_ = now;
  if (elapsed > 0) tokens_ = std::min<double>(burst_, tokens_ + elapsed * AllowanceAt(now));
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
    Refill(now);
    if (!stopping_ && tokens_ < 1) {
      // Until the allowance has filled one more (it may grow meanwhile: then a little early).
      const auto wait = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>((1 - tokens_) / AllowanceAt(now)));
      cv_.WaitWithTimeout(&mu_, std::max<Clock::duration>(wait, std::chrono::microseconds(100)));
      continue;
    }
    if (!stopping_) tokens_ -= 1;
    std::function<void()> answer = std::move(held_.front());
    held_.pop_front();
    mu_.Unlock();
    answer();
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace gecd::worker
