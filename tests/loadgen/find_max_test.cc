#include "loadgen/find_max.h"

#include <vector>

#include "gtest/gtest.h"

namespace gecd::loadgen {
namespace {

// A server with a fixed capacity: p99 grows like an M/M/1 queue's as the load nears it, and
// above it requests time out and the excess is rejected.
TrialFn Server(double capacity_qps, double base_p99_s) {
  return [=](double qps) -> absl::StatusOr<TrialMeasurement> {
    if (qps >= capacity_qps) {
      return TrialMeasurement{capacity_qps, 10.0, (qps - capacity_qps) / qps};
    }
    return TrialMeasurement{qps, base_p99_s / (1 - qps / capacity_qps), 0};
  };
}

// The search ends at most one precision step below the true boundary, never above it.
void ExpectFoundJustBelow(const absl::StatusOr<FindMaxResult>& result, double boundary,
                          double precision) {
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LE(result->max_qps, boundary);
  EXPECT_GE(result->max_qps, boundary * (1 - precision));
}

TEST(FindMaxTest, GrowsThenBisectsToTheSloBoundary) {
  FindMaxOptions options;  // start 100, x2, 5%, p99 <= 1 s
  std::vector<double> seen;
  absl::StatusOr<FindMaxResult> result = FindMaxQps(
      options, Server(7300, 0.05), [&](const Trial& t) { seen.push_back(t.offered_qps); });
  ExpectFoundJustBelow(result, 7300 * (1 - 0.05), options.precision);  // p99 reaches 1 s there
  ASSERT_GE(seen.size(), 10u);
  // The failure at 12,800 is confirmed by a second run before the search bisects.
  EXPECT_EQ(std::vector<double>(seen.begin(), seen.begin() + 9),
            (std::vector<double>{100, 200, 400, 800, 1600, 3200, 6400, 12800, 12800}));
  EXPECT_EQ(seen.size(), result->trials.size());
  EXPECT_FALSE(result->trials[7].passed);
  EXPECT_FALSE(result->trials[8].passed);
  EXPECT_EQ(result->trials[9].offered_qps, 9600);
}

// One stall of a shared host fails one trial: its second run passes, and the search goes on as
// if the first had.
TEST(FindMaxTest, AFailureIsConfirmedBeforeItCounts) {
  FindMaxOptions options;
  options.max_trials = 30;
  const TrialFn server = Server(7300, 0.05);
  int runs_at_800 = 0;
  const TrialFn stalls_once = [&](double qps) -> absl::StatusOr<TrialMeasurement> {
    if (qps == 800 && runs_at_800++ == 0) return TrialMeasurement{qps, 1.2, 0};
    return server(qps);
  };
  ExpectFoundJustBelow(FindMaxQps(options, stalls_once, nullptr), 7300 * (1 - 0.05),
                       options.precision);
  EXPECT_EQ(runs_at_800, 2);
  // Without confirmation the stall decides: the search stays below 800.
  options.confirm_failures = 0;
  runs_at_800 = 0;
  absl::StatusOr<FindMaxResult> unconfirmed = FindMaxQps(options, stalls_once, nullptr);
  ASSERT_TRUE(unconfirmed.ok());
  EXPECT_LT(unconfirmed->max_qps, 800);
}

TEST(FindMaxTest, ErrorRateAloneCanFailATrial) {
  FindMaxOptions options;
  options.start_qps = 1000;
  const TrialFn flaky = [](double qps) -> absl::StatusOr<TrialMeasurement> {
    return TrialMeasurement{qps, 0.01, qps > 3000 ? 0.02 : 0.005};
  };
  ExpectFoundJustBelow(FindMaxQps(options, flaky, nullptr), 3000, options.precision);
}

TEST(FindMaxTest, BisectsDownWhenTheFirstTrialFails) {
  FindMaxOptions options;
  options.start_qps = 1000;
  options.max_trials = 30;
  ExpectFoundJustBelow(FindMaxQps(options, Server(300, 0.05), nullptr), 285, options.precision);
}

TEST(FindMaxTest, StopsAtTheTrialLimitAndReportsZeroIfNothingPassed) {
  FindMaxOptions options;
  options.max_trials = 3;
  absl::StatusOr<FindMaxResult> result = FindMaxQps(options, Server(1, 0.05), nullptr);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->trials.size(), 3u);
  EXPECT_EQ(result->max_qps, 0);
}

TEST(FindMaxTest, AFailedTrialRunAbortsTheSearch) {
  int runs = 0;
  const TrialFn broken = [&](double) -> absl::StatusOr<TrialMeasurement> {
    ++runs;
    return absl::UnavailableError("no server");
  };
  EXPECT_EQ(FindMaxQps(FindMaxOptions(), broken, nullptr).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(runs, 1);
}

TEST(FindMaxTest, RejectsOptionsThatCannotConverge) {
  FindMaxOptions options;
  options.growth = 1;
  EXPECT_EQ(FindMaxQps(options, Server(100, 0.05), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gecd::loadgen
