#include "supervisor/watchdog.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gecd::supervisor {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Clock = Watchdog::Clock;

// Sets the watchdog variables for one test and removes them after.
class WatchdogEnvironment {
 public:
  WatchdogEnvironment(const char* usec, const char* pid) {
    if (usec != nullptr) setenv("WATCHDOG_USEC", usec, 1);
    if (pid != nullptr) setenv("WATCHDOG_PID", pid, 1);
  }
  ~WatchdogEnvironment() {
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
  }
};

TEST(WatchdogTest, IntervalFromEnvironment) {
  {
    WatchdogEnvironment env(nullptr, nullptr);
    const auto interval = Watchdog::IntervalFromEnvironment();
    ASSERT_TRUE(interval.ok()) << interval.status();
    EXPECT_FALSE(interval->has_value());
  }
  {
    WatchdogEnvironment env("30000000", nullptr);
    const auto interval = Watchdog::IntervalFromEnvironment();
    ASSERT_TRUE(interval.ok()) << interval.status();
    EXPECT_EQ(interval->value(), microseconds(30'000'000));
  }
  {
    const std::string self = absl::StrCat(getpid());
    WatchdogEnvironment env("500000", self.c_str());
    const auto interval = Watchdog::IntervalFromEnvironment();
    ASSERT_TRUE(interval.ok()) << interval.status();
    EXPECT_EQ(interval->value(), microseconds(500'000));
  }
  {
    // Meant for another process (ours inherited it): not ours to ping.
    const std::string other = absl::StrCat(getpid() + 1);
    WatchdogEnvironment env("500000", other.c_str());
    const auto interval = Watchdog::IntervalFromEnvironment();
    ASSERT_TRUE(interval.ok()) << interval.status();
    EXPECT_FALSE(interval->has_value());
  }
  for (const char* bad : {"0", "-5", "10s", "x"}) {
    WatchdogEnvironment env(bad, nullptr);
    const auto interval = Watchdog::IntervalFromEnvironment();
    ASSERT_FALSE(interval.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(interval.status().message(), "WATCHDOG_USEC")) << bad;
  }
}

TEST(WatchdogTest, PingsEveryHalfIntervalWhileIdle) {
  Watchdog watchdog(microseconds(1'000'000));
  EXPECT_EQ(watchdog.ping_period(), milliseconds(500));
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(watchdog.Observe(t0, 0, false));
  EXPECT_FALSE(watchdog.Observe(t0 + milliseconds(100), 0, false));
  EXPECT_FALSE(watchdog.Observe(t0 + milliseconds(499), 0, false));
  EXPECT_TRUE(watchdog.Observe(t0 + milliseconds(500), 0, false));
  EXPECT_FALSE(watchdog.Observe(t0 + milliseconds(600), 0, false));
  // Idle for long: nothing queued, so no step is owed.
  EXPECT_TRUE(watchdog.Observe(t0 + milliseconds(60'000), 0, false));
  EXPECT_FALSE(watchdog.stalled());
}

TEST(WatchdogTest, PingsWhileStepsAdvanceWithWorkQueued) {
  Watchdog watchdog(microseconds(1'000'000));
  const Clock::time_point t0 = Clock::now();
  int pings = 0;
  for (int i = 0; i <= 100; ++i) {
    pings += watchdog.Observe(t0 + milliseconds(50 * i), /*engine_steps=*/i, true);
  }
  EXPECT_EQ(pings, 11);  // at 0, 500, ..., 5000 ms
  EXPECT_FALSE(watchdog.stalled());
}

TEST(WatchdogTest, WithholdsPingsWhileWorkWaitsAndNoStepFinishes) {
  Watchdog watchdog(microseconds(1'000'000));
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(watchdog.Observe(t0, 7, true));
  // Stuck at step 7 with work queued: still within the half interval a step may take.
  EXPECT_FALSE(watchdog.Observe(t0 + milliseconds(400), 7, true));
  EXPECT_FALSE(watchdog.stalled());
  for (int ms = 500; ms <= 5'000; ms += 50) {
    EXPECT_FALSE(watchdog.Observe(t0 + milliseconds(ms), 7, true)) << ms;
    EXPECT_TRUE(watchdog.stalled()) << ms;
  }
  // One step later it is healthy again, and the overdue ping goes out at once.
  EXPECT_TRUE(watchdog.Observe(t0 + milliseconds(5'050), 8, true));
  EXPECT_FALSE(watchdog.stalled());
}

TEST(WatchdogTest, QueuedWorkAfterAnIdleSpellGetsTheFullHalfInterval) {
  Watchdog watchdog(microseconds(1'000'000));
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(watchdog.Observe(t0, 3, false));
  EXPECT_FALSE(watchdog.Observe(t0 + milliseconds(450), 3, false));
  // Work arrives at 450 ms; the engine owes a step only from then.
  EXPECT_TRUE(watchdog.Observe(t0 + milliseconds(550), 3, true));
  EXPECT_FALSE(watchdog.stalled());
  EXPECT_FALSE(watchdog.Observe(t0 + milliseconds(950), 3, true));
  EXPECT_TRUE(watchdog.stalled());
  // The queue empties (cancelled, say): no step is owed, pings resume.
  EXPECT_TRUE(watchdog.Observe(t0 + milliseconds(1'050), 3, false));
  EXPECT_FALSE(watchdog.stalled());
}

TEST(WatchdogTest, ATinyIntervalStillLetsStepsCount) {
  Watchdog watchdog(microseconds(1));
  EXPECT_EQ(watchdog.ping_period(), milliseconds(1));
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(watchdog.Observe(t0, 1, true));
  EXPECT_TRUE(watchdog.Observe(t0 + milliseconds(1), 2, true));
  EXPECT_FALSE(watchdog.stalled());
}

}  // namespace
}  // namespace gecd::supervisor
