#ifndef GECD_SUPERVISOR_WATCHDOG_H_
#define GECD_SUPERVISOR_WATCHDOG_H_

#include <chrono>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"

// The supervisor's side of systemd's watchdog (WatchdogSec=, sd_watchdog_enabled(3)), without
// libsystemd. A live supervisor alone proves little: the pings say the engine is healthy, so
// they stop while it has work queued and finishes no step, and systemd restarts a wedged
// daemon instead of leaving it to hold its requests forever.
namespace gecd::supervisor {

// Decides, from what the supervisor sees of the engine, when a WATCHDOG=1 is due. Owns no
// socket and reads no clock: the caller passes the time, which keeps it testable.
class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // The interval systemd expects pings within: $WATCHDOG_USEC when $WATCHDOG_PID is unset or
  // names this process. nullopt (no watchdog) when unset or meant for another process; an
  // error naming the variable when it is not a positive number of microseconds.
  static absl::StatusOr<std::optional<std::chrono::microseconds>> IntervalFromEnvironment();

  explicit Watchdog(std::chrono::microseconds interval);

  // Pings go out every half interval, as sd_watchdog_enabled(3) advises; an engine that finishes
  // no step for as long with work queued is stalled.
  Clock::duration ping_period() const { return ping_period_; }

  // One look at the engine: its step counter and whether it has work queued (false while no
  // engine is ready: start-up and restarts have their own timeouts). True when a WATCHDOG=1 is
  // due now; the caller sends it.
  bool Observe(Clock::time_point now, uint64_t engine_steps, bool work_queued);

  // Whether the last Observe() found the engine stalled.
  bool stalled() const { return stalled_; }

 private:
  const Clock::duration ping_period_;
  std::optional<Clock::time_point> last_ping_;
  Clock::time_point progress_at_;  // last seen stepping, or with nothing to do
  uint64_t steps_ = 0;
  bool stalled_ = false;
};

}  // namespace gecd::supervisor

#endif  // GECD_SUPERVISOR_WATCHDOG_H_
