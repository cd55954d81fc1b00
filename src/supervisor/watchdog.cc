#include "supervisor/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gecd::supervisor {

absl::StatusOr<std::optional<std::chrono::microseconds>> Watchdog::IntervalFromEnvironment() {
  const char* usec = std::getenv("WATCHDOG_USEC");
  if (usec == nullptr || usec[0] == '\0') return std::nullopt;
  if (const char* pid = std::getenv("WATCHDOG_PID"); pid != nullptr && pid[0] != '\0') {
    int64_t for_pid = 0;
    if (!absl::SimpleAtoi(pid, &for_pid)) {
      return absl::InvalidArgumentError(absl::StrCat("WATCHDOG_PID '", pid, "' is not a pid"));
    }
    if (for_pid != getpid()) return std::nullopt;
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(usec, &n) || n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("WATCHDOG_USEC '", usec, "' is not a positive number of microseconds"));
  }
  return std::chrono::microseconds(n);
}

// At least a millisecond, so that a nonsensical WATCHDOG_USEC=1 still lets steps count.
Watchdog::Watchdog(std::chrono::microseconds interval)
    : ping_period_(std::max<Clock::duration>(interval / 2, std::chrono::milliseconds(1))) {}

bool Watchdog::Observe(Clock::time_point now, uint64_t engine_steps, bool work_queued) {
  if (!last_ping_) progress_at_ = now;  // the first look: nothing to compare with yet
  if (engine_steps != steps_ || !work_queued) progress_at_ = now;
  steps_ = engine_steps;
  stalled_ = now - progress_at_ >= ping_period_;
  if (stalled_ || (last_ping_ && now - *last_ping_ < ping_period_)) return false;
  last_ping_ = now;
  return true;
}

}  // namespace gecd::supervisor
