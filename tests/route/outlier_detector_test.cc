#include "route/outlier_detector.h"

#include "gtest/gtest.h"

namespace gecd::route {
namespace {

using std::chrono::milliseconds;
using Clock = OutlierDetector::Clock;

OutlierDetector Make() {
  return OutlierDetector({.failures = 3, .base = milliseconds(100), .max = milliseconds(450)});
}

TEST(OutlierDetectorTest, ConsecutiveFailuresEjectAndASuccessStartsOver) {
  OutlierDetector d = Make();
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(d.RecordFailure(t0));
  EXPECT_FALSE(d.RecordFailure(t0));
  d.RecordSuccess();
  EXPECT_FALSE(d.RecordFailure(t0));
  EXPECT_FALSE(d.RecordFailure(t0));
  EXPECT_FALSE(d.ejected());
  EXPECT_TRUE(d.RecordFailure(t0));
  EXPECT_TRUE(d.ejected());
  EXPECT_EQ(d.back_off(), milliseconds(100));
  // Answers of calls sent before the ejection change nothing.
  EXPECT_FALSE(d.RecordFailure(t0));
  EXPECT_EQ(d.ejected_until(), t0 + milliseconds(100));
}

TEST(OutlierDetectorTest, FailedChecksDoubleTheBackOffUpToTheCap) {
  OutlierDetector d = Make();
  Clock::time_point t = Clock::now();
  for (int i = 0; i < 3; ++i) d.RecordFailure(t);
  EXPECT_FALSE(d.DueForCheck(t + milliseconds(99)));
  t += milliseconds(100);
  ASSERT_TRUE(d.DueForCheck(t));
  d.RecordCheck(/*passed=*/false, t);
  EXPECT_EQ(d.back_off(), milliseconds(200));
  EXPECT_FALSE(d.DueForCheck(t + milliseconds(199)));
  t += milliseconds(200);
  d.RecordCheck(false, t);
  EXPECT_EQ(d.back_off(), milliseconds(400));
  t += milliseconds(400);
  d.RecordCheck(false, t);
  EXPECT_EQ(d.back_off(), milliseconds(450));  // capped
  t += milliseconds(450);
  d.RecordCheck(true, t);
  EXPECT_FALSE(d.ejected());
  EXPECT_FALSE(d.DueForCheck(t + milliseconds(10000)));
}

TEST(OutlierDetectorTest, EjectionsInARowKeepDoublingUntilHealthyForTheCap) {
  OutlierDetector d = Make();
  Clock::time_point t = Clock::now();
  for (int i = 0; i < 3; ++i) d.RecordFailure(t);
  t += milliseconds(100);
  d.RecordCheck(true, t);
  // Fails again soon after returning: the second ejection in a row lasts twice as long.
  for (int i = 0; i < 3; ++i) d.RecordFailure(t + milliseconds(10));
  EXPECT_EQ(d.back_off(), milliseconds(200));
  t += milliseconds(300);
  d.RecordCheck(true, t);
  // Healthy for longer than the cap: the next ejection starts from the base again.
  t += milliseconds(1000);
  for (int i = 0; i < 3; ++i) d.RecordFailure(t);
  EXPECT_EQ(d.back_off(), milliseconds(100));
}

}  // namespace
}  // namespace gecd::route
