#include "worker/refusal_pacer.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace gecd::worker {

namespace {

RefusalPacer::Options Normalized(RefusalPacer::Options o) {
  o.max_per_second = std::max(o.max_per_second, 0.0);
  o.burst = std::max(o.burst, 1);
  o.per_admitted = std::max(o.per_admitted, 0.0);
  o.floor_per_second = std::clamp(o.floor_per_second, 0.0, o.max_per_second);
  o.rate_window = std::max(o.rate_window, std::chrono::milliseconds(1));
  o.max_wait = std::max(o.max_wait, std::chrono::microseconds(0));
  return o;
}
}  // namespace

RefusalPacer::RefusalPacer(Options options)
    : options_(Normalized(options)), tokens_(options_.burst), filled_at_(Clock::now()) {
  if (options_.max_per_second > 0) thread_ = std::thread([this] { Loop(); });
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
  if (options_.max_per_second == 0) {
    answer();
    return;
  }
  {
    MutexLock lock(&mu_);
    const Clock::time_point now = Clock::now();
    Refill(now);
    // First come, first answered: while some wait, a new one waits behind them.
    if (!stopping_ && (!held_.empty() || tokens_ < 1)) {
      held_.push_back({std::move(answer), now});
      if (held_.size() >= options_.storm_held) storm_ = true;
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
  if (elapsed > 0) {
    tokens_ = std::min<double>(options_.burst, tokens_ + elapsed * AllowanceAt(now));
  }
}

void RefusalPacer::Admitted() {
  if (options_.per_admitted == 0) return;
  const Clock::time_point now = Clock::now();
  MutexLock lock(&mu_);
  const double window = std::chrono::duration<double>(options_.rate_window).count();
  const double age = std::chrono::duration<double>(now - admitted_at_).count();
  admitted_rate_ = admitted_rate_ * std::exp(-age / window) + 1.0 / window;
  admitted_at_ = now;
}

double RefusalPacer::allowance() const {
  MutexLock lock(&mu_);
  return AllowanceAt(Clock::now());
}

bool RefusalPacer::in_storm() const {
  MutexLock lock(&mu_);
  return Storm();
}

double RefusalPacer::AllowanceAt(Clock::time_point now) const {
  if (options_.per_admitted == 0) return options_.max_per_second;
  const double window = std::chrono::duration<double>(options_.rate_window).count();
  const double age = std::chrono::duration<double>(now - admitted_at_).count();
  const double rate = admitted_rate_ * std::exp(-age / window);
  return std::min(options_.max_per_second,
                  std::max({options_.per_admitted * rate, options_.floor_per_second, 1.0}));
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
    const bool token = tokens_ >= 1;
    // Outside a storm the first in line goes once it has waited max_wait, token or not.
    const Clock::time_point due = held_.front().since + options_.max_wait;
    if (!stopping_ && !token && (Storm() || now < due)) {
      // Until the allowance has filled one more (it may grow meanwhile: then a little early),
      // or the first in line is due.
      auto wait = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>((1 - tokens_) / AllowanceAt(now)));
      if (!Storm()) wait = std::min<Clock::duration>(wait, due - now);
      cv_.WaitWithTimeout(&mu_, std::max<Clock::duration>(wait, std::chrono::microseconds(100)));
      continue;
    }
    if (!stopping_ && token) tokens_ -= 1;
    std::function<void()> answer = std::move(held_.front().answer);
    held_.pop_front();
    if (held_.size() <= options_.storm_held / 4) storm_ = false;
    mu_.Unlock();
    answer();
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace gecd::worker
