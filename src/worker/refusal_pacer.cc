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
  o.storm_batch = std::clamp(o.storm_batch, 1, o.burst);
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

void RefusalPacer::Refuse(std::function<void()> answer, Clock::time_point due, uint64_t key) {
  if (options_.max_per_second == 0) {
    answer();
    return;
  }
  {
    MutexLock lock(&mu_);
    const Clock::time_point now = Clock::now();
    Refill(now);
    // First come, first answered: while some wait, a new one waits behind them.
    if (!stopping_ && due > now && (!held_.empty() || tokens_ < 1)) {
      const uint64_t seq = ++seq_;
      held_.emplace(seq, Held{.answer = std::move(answer), .since = now, .due = due, .key = key});
      if (due != Clock::time_point::max()) dues_.emplace(due, seq);
      if (key != 0) seq_of_key_[key] = seq;
      if (!storm_ && !left_for_growth_ && held_.size() >= options_.storm_held) {
        const double age = std::chrono::duration<double>(now - crowded_at_) /
                           std::chrono::duration<double>(kCrowdedWindow);
        crowded_ = crowded_ * std::exp(-age) + 1;
        crowded_at_ = now;
        // (Less half an arrival: those of one instant have decayed a little.)
        if (crowded_ >= static_cast<double>(kCrowdedInStorm * options_.storm_held) - 0.5) {
          storm_ = true;
          crowded_ = 0;
          measured_at_ = now;
          measured_population_ = Population();
          growing_periods_ = 0;
          if (options_.observer != nullptr) options_.observer->StormBegun();
        }
      }
      Notify();
      // The pacer's thread waits for the first in line or the nearest deadline: this may be
      // either.
      if (held_.size() == 1 || (!dues_.empty() && dues_.begin()->second == seq)) cv_.Signal();
      return;
    }
    if (tokens_ >= 1) tokens_ -= 1;
  }
  answer();
}

bool RefusalPacer::Cancel(uint64_t key) {
  std::function<void()> answer;
  {
    MutexLock lock(&mu_);
    const auto it = seq_of_key_.find(key);
    if (key == 0 || it == seq_of_key_.end()) return false;
    answer = Take(it->second);
  }
  answer();
  return true;
}

std::function<void()> RefusalPacer::Take(uint64_t seq) {
  const auto it = held_.find(seq);
  Held held = std::move(it->second);
  held_.erase(it);
  if (held.due != Clock::time_point::max()) dues_.erase({held.due, seq});
  if (held.key != 0) seq_of_key_.erase(held.key);
  if (held_.size() <= options_.storm_held / 4) storm_ = false;
  if (held_.size() < options_.storm_held) left_for_growth_ = false;
  Notify();
  return std::move(held.answer);
}

void RefusalPacer::WatchGrowth(Clock::time_point now) {
  if (!storm_ || options_.storm_growth_period.count() == 0 ||
      now < measured_at_ + options_.storm_growth_period) {
    return;
  }
  const size_t population = Population();
  growing_periods_ =
      population >= measured_population_ + options_.storm_held ? growing_periods_ + 1 : 0;
  measured_at_ = now;
  measured_population_ = population;
  if (growing_periods_ >= kGrowingPeriods) {
    storm_ = false;
    left_for_growth_ = true;
    if (options_.observer != nullptr) options_.observer->StormLeftForGrowth();
    Notify();
  }
}

void RefusalPacer::Notify() {
  if (options_.observer != nullptr) options_.observer->Held(held_.size(), Storm());
}

size_t RefusalPacer::Population() const {
  return held_.size() + (options_.admitted_in_flight ? options_.admitted_in_flight() : 0);
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
  admitted_rate_ =
      AdmittedRateAt(now) + 1.0 / std::chrono::duration<double>(options_.rate_window).count();
  admitted_at_ = now;
}

double RefusalPacer::AdmittedRateAt(Clock::time_point now) const {
  const double window = std::chrono::duration<double>(options_.rate_window).count();
  const double age = std::chrono::duration<double>(now - admitted_at_).count();
  return admitted_rate_ * std::exp(-age / window);
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
  return std::min(options_.max_per_second, std::max({options_.per_admitted * AdmittedRateAt(now),
                                                     options_.floor_per_second, 1.0}));
}

size_t RefusalPacer::waiting() const {
  MutexLock lock(&mu_);
  return held_.size();
}

void RefusalPacer::Loop() {
  mu_.Lock();
  bool in_batch = false;  // in a storm, sending a batch
  // Outside a storm, sending every refusal held when the first in line's patience ended: the
  // last of them.
  uint64_t flush_through = 0;
  while (true) {
    if (held_.empty()) {
      if (stopping_) break;
      cv_.Wait(&mu_);
      continue;
    }
    const Clock::time_point now = Clock::now();
    Refill(now);
    WatchGrowth(now);
    // In a storm a batch goes once the allowance has filled for all of it (see above).
    const double need =
        in_batch || !Storm()
            ? 1.0
            : static_cast<double>(std::min<size_t>(options_.storm_batch, held_.size()));
    const bool token = tokens_ >= need;
    // One whose call's deadline is near goes first, token or not; otherwise the first in line,
    // with a token, or outside a storm once it has waited max_wait.
    uint64_t next = held_.begin()->first;
    const bool overdue = !dues_.empty() && dues_.begin()->first <= now;
    if (overdue) next = dues_.begin()->second;
    const Clock::time_point patience_end = held_.begin()->second.since + options_.max_wait;
    const bool flushing = !Storm() && next <= flush_through;
    if (!stopping_ && !overdue && !token && !flushing && (Storm() || now < patience_end)) {
      // Until the allowance has filled what is needed (it may grow meanwhile: then a little
      // early), the first in line is due, or the nearest deadline.
      auto wait = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>((need - tokens_) / AllowanceAt(now)));
      if (!Storm()) wait = std::min<Clock::duration>(wait, patience_end - now);
      if (!dues_.empty()) wait = std::min<Clock::duration>(wait, dues_.begin()->first - now);
      if (storm_ && options_.storm_growth_period.count() > 0) {
        wait = std::min<Clock::duration>(wait, options_.storm_growth_period);
      }
      in_batch = false;
      cv_.WaitWithTimeout(&mu_, std::max<Clock::duration>(wait, std::chrono::microseconds(100)));
      continue;
    }
    if (!stopping_ && token) tokens_ -= 1;
    in_batch = token && Storm();
    if (!Storm() && !flushing && now >= patience_end) flush_through = held_.rbegin()->first;
    std::function<void()> answer = Take(next);
    mu_.Unlock();
    answer();
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace gecd::worker
