#include "common/startup_phases.h"

#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Clock = StartupPhases::Clock;

TEST(StartupPhasesTest, EachMarkEndsThePhaseSinceThePreviousOne) {
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  StartupPhases phases(microseconds(21'400), microseconds(20'000), t0);
  phases.Mark("config", t0 + milliseconds(2), ThreadCpuTime());
  phases.Mark("model open", t0 + milliseconds(7), ThreadCpuTime());
  const std::string summary = phases.Summary();
  EXPECT_THAT(summary, HasSubstr("exec→main 21 ms (20 ms CPU), config 2 ms ("));
  EXPECT_THAT(summary, HasSubstr("model open 5 ms ("));
  EXPECT_THAT(summary, HasSubstr("; 28 ms ("));
  EXPECT_THAT(summary, HasSubstr("since exec"));
  EXPECT_EQ(phases.Total(), microseconds(28'400));
}

TEST(StartupPhasesTest, PhasesOfTheSameNameAddUpInTheOrderFirstMarked) {
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  const microseconds cpu0 = ThreadCpuTime();
  StartupPhases phases(std::nullopt, microseconds(0), t0);
  phases.Mark("weights", t0 + milliseconds(10), cpu0 + milliseconds(4));
  phases.Mark("quantization", t0 + milliseconds(13), cpu0 + milliseconds(7));
  phases.Mark("weights", t0 + milliseconds(20), cpu0 + milliseconds(9));
  const std::string summary = phases.Summary();
  EXPECT_THAT(summary, HasSubstr("weights 17 ms"));
  EXPECT_LT(summary.find("weights"), summary.find("quantization"));
  EXPECT_THAT(summary, HasSubstr("quantization 3 ms (3 ms CPU)"));
  EXPECT_THAT(summary, HasSubstr("; 20 ms ("));
  EXPECT_THAT(summary, HasSubstr("since start"));
}

TEST(StartupPhasesTest, AClockGoingBackwardsCountsNothing) {
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  StartupPhases phases(std::nullopt, microseconds(0), t0);
  phases.Mark("a", t0 + milliseconds(5), ThreadCpuTime());
  phases.Mark("b", t0 + milliseconds(3), ThreadCpuTime());
  EXPECT_THAT(phases.Summary(), HasSubstr("b 0 ms"));
  EXPECT_EQ(phases.Total(), microseconds(5'000));
}

TEST(StartupPhasesTest, CpuTimeIsTheMarkingThreadsOwn) {
  StartupPhases phases;
  // Sleeping takes wall time and no CPU; spinning takes both.
  std::this_thread::sleep_for(milliseconds(30));
  phases.Mark("sleep");
  const microseconds spin_until = ThreadCpuTime() + milliseconds(30);
  while (ThreadCpuTime() < spin_until) {
  }
  phases.Mark("spin");
  const std::string summary = phases.Summary();
  EXPECT_THAT(summary, ::testing::ContainsRegex("sleep [0-9]+ ms \\([0-4] ms CPU\\)"));
  EXPECT_THAT(summary, ::testing::ContainsRegex("spin [0-9]+ ms \\((2[5-9]|[3-9][0-9]) ms CPU\\)"));
}

TEST(StartupPhasesTest, TimeSinceExecIsThisProcesssAge) {
  const std::optional<microseconds> age = TimeSinceExec();
  ASSERT_TRUE(age.has_value()) << "/proc/self/stat unreadable";
  // This test binary started before the test ran and less than a day ago; the clock tick
  // (10 ms) bounds the resolution.
  EXPECT_GE(*age, microseconds(0));
  EXPECT_LT(*age, std::chrono::hours(24));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_GE(*TimeSinceExec(), *age + milliseconds(30));
}

}  // namespace
}  // namespace gecd
