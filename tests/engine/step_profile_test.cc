// The lap timer behind the CPU backend's stage marks (engine/step_profile.h).
#include "engine/step_profile.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace gecd::engine::profile {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TEST(StepProfileTest, MarksChargeTheStageThatRanToIt) {
  Reset();
  Begin(kQkv);
  std::this_thread::sleep_for(milliseconds(3));
  Mark(kAttention);
  std::this_thread::sleep_for(milliseconds(1));
  End();
  const Counters c = Snapshot();
  EXPECT_EQ(c.forwards, 1u);
  EXPECT_GE(c.ns[kQkv], static_cast<uint64_t>(nanoseconds(milliseconds(3)).count()));
  EXPECT_GE(c.ns[kAttention], static_cast<uint64_t>(nanoseconds(milliseconds(1)).count()));
  EXPECT_EQ(c.ns[kLmHead], 0u);
}

TEST(StepProfileTest, EndClosesTheLapAndResetClears) {
  Reset();
  Begin(kSample);
  End();
  End();  // nothing open: charges nothing
  Mark(kDown);
  std::this_thread::sleep_for(milliseconds(1));
  Mark(kResult);  // Mark without Begin opens kDown's lap like Begin, without counting a Forward
  End();
  EXPECT_EQ(Snapshot().forwards, 1u);
  Reset();
  const Counters c = Snapshot();
  EXPECT_EQ(c.forwards, 0u);
  for (uint64_t ns : c.ns) EXPECT_EQ(ns, 0u);
}

TEST(StepProfileTest, EveryStageHasAName) {
  for (int s = 0; s < kNumStages; ++s) EXPECT_STRNE(StageName(s), "?") << s;
  EXPECT_STREQ(StageName(kNumStages), "?");
  EXPECT_STREQ(StageName(-1), "?");
}

}  // namespace
}  // namespace gecd::engine::profile
