#include "loadgen/arrival_schedule.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::loadgen {
namespace {

// Arrivals in [from_s, to_s) of run time.
int CountBetween(ArrivalSchedule schedule, double from_s, double to_s) {
  int n = 0;
  for (double t = schedule.Next(); t < to_s; t = schedule.Next()) n += t >= from_s;
  return n;
}

TEST(ArrivalScheduleTest, ConstantRateGapsAreExponential) {
  ArrivalSchedule schedule(RateProfile::Constant(1000), 0, 42);
  const int n = 200000;
  double previous = 0, sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double t = schedule.Next();
    ASSERT_GT(t, previous);
    const double gap = t - previous;
    sum += gap;
    sum_sq += gap * gap;
    previous = t;
  }
  const double mean = sum / n;
  const double cv = std::sqrt(sum_sq / n - mean * mean) / mean;
  EXPECT_NEAR(mean, 1e-3, 1e-3 * 0.01);  // standard error 0.22%
  EXPECT_NEAR(cv, 1.0, 0.02);            // 1 for exponential gaps
}

TEST(ArrivalScheduleTest, SameSeedSameSchedule) {
  ArrivalSchedule a(RateProfile::Constant(50), 0, 9), b(RateProfile::Constant(50), 0, 9);
  ArrivalSchedule c(RateProfile::Constant(50), 0, 10);
  const double first = a.Next();
  EXPECT_EQ(first, b.Next());
  EXPECT_NE(first, c.Next());
}

// Expected counts are integrals of the rate; tolerances are 5 standard deviations (sqrt(n)).
TEST(ArrivalScheduleTest, RampFollowsTheProfile) {
  const RateProfile ramp = RateProfile::Ramp(0, 2000, 10);
  EXPECT_NEAR(CountBetween(ArrivalSchedule(ramp, 0, 1), 0, 5), 2500, 5 * std::sqrt(2500));
  EXPECT_NEAR(CountBetween(ArrivalSchedule(ramp, 0, 1), 5, 10), 7500, 5 * std::sqrt(7500));
  // Past its end the ramp holds its final rate.
  EXPECT_NEAR(CountBetween(ArrivalSchedule(ramp, 0, 1), 10, 12), 4000, 5 * std::sqrt(4000));
}

TEST(ArrivalScheduleTest, WarmupRunsAtTheStartingRate) {
  const RateProfile ramp = RateProfile::Ramp(1000, 3000, 10);
  EXPECT_NEAR(CountBetween(ArrivalSchedule(ramp, 4, 3), 0, 4), 4000, 5 * std::sqrt(4000));
  EXPECT_NEAR(CountBetween(ArrivalSchedule(ramp, 4, 3), 4, 14), 20000, 5 * std::sqrt(20000));
}

TEST(ArrivalScheduleTest, DiurnalPeaksHalfAPeriodIn) {
  const RateProfile diurnal = RateProfile::Diurnal(100, 900, 20);
  EXPECT_DOUBLE_EQ(diurnal.At(0), 100);
  EXPECT_DOUBLE_EQ(diurnal.At(10), 900);
  EXPECT_NEAR(diurnal.At(20), 100, 1e-9);
  // Mean rate 500/s over whole periods; the middle of a period carries more than its edges.
  EXPECT_NEAR(CountBetween(ArrivalSchedule(diurnal, 0, 5), 0, 40), 20000, 5 * std::sqrt(20000));
  const int edges = CountBetween(ArrivalSchedule(diurnal, 0, 5), 0, 5);
  const int middle = CountBetween(ArrivalSchedule(diurnal, 0, 5), 7.5, 12.5);
  EXPECT_GT(middle, 3 * edges);
}

TEST(RateProfileTest, ParsesRampAndDiurnal) {
  absl::StatusOr<RateProfile> ramp = RateProfile::Parse("ramp:100:500", 8);
  ASSERT_TRUE(ramp.ok()) << ramp.status();
  EXPECT_DOUBLE_EQ(ramp->At(4), 300);
  EXPECT_DOUBLE_EQ(ramp->Peak(), 500);
  absl::StatusOr<RateProfile> diurnal = RateProfile::Parse("diurnal:10:30:60", 8);
  ASSERT_TRUE(diurnal.ok()) << diurnal.status();
  EXPECT_DOUBLE_EQ(diurnal->At(30), 30);
}

TEST(RateProfileTest, RejectsMalformedSpecs) {
  for (const char* spec : {"ramp:100", "ramp:0:0", "ramp:a:5", "ramp:-1:5", "diurnal:10:5:60",
                           "diurnal:1:2:0", "sine:1:2:3", "diurnal:1:2"}) {
    EXPECT_EQ(RateProfile::Parse(spec, 10).status().code(), absl::StatusCode::kInvalidArgument)
        << spec;
  }
}

}  // namespace
}  // namespace gecd::loadgen
