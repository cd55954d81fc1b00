#include "route/slow_start.h"

#include <cmath>

#include "gtest/gtest.h"

namespace gecd::route {
namespace {

TEST(SlowStartTest, RampsFromTheMinimumToFullOverTheWindow) {
  const SlowStart s{.window_s = 10, .min_weight = 0.1, .aggression = 1};
  EXPECT_DOUBLE_EQ(s.Weight(0), 0.1);
  EXPECT_DOUBLE_EQ(s.Weight(0.5), 0.1);  // (0.05) is below the floor
  EXPECT_DOUBLE_EQ(s.Weight(5), 0.5);
  EXPECT_DOUBLE_EQ(s.Weight(9), 0.9);
  EXPECT_DOUBLE_EQ(s.Weight(10), 1.0);
  EXPECT_DOUBLE_EQ(s.Weight(1e6), 1.0);
  EXPECT_DOUBLE_EQ(s.Weight(-3), 0.1);  // a clock step backwards is not negative weight
}

TEST(SlowStartTest, AggressionBendsTheCurve) {
  const SlowStart fast{.window_s = 10, .min_weight = 0.1, .aggression = 2};
  EXPECT_NEAR(fast.Weight(5), std::sqrt(0.5), 1e-12);
  const SlowStart slow{.window_s = 10, .min_weight = 0.01, .aggression = 0.5};
  EXPECT_NEAR(slow.Weight(5), 0.25, 1e-12);
}

TEST(SlowStartTest, ZeroWindowIsOff) {
  const SlowStart off{.window_s = 0};
  EXPECT_DOUBLE_EQ(off.Weight(0), 1.0);
}

}  // namespace
}  // namespace gecd::route
