#include "route/backoff.h"

#include <gtest/gtest.h>

#include <set>

namespace gecd::route {
namespace {

TEST(Backoff, DoublesWithJitterUpToTheCapAndResets) {
  Backoff backoff(absl::Milliseconds(500), absl::Seconds(30), /*seed=*/7);
  absl::Duration d = absl::Milliseconds(500);
  for (int i = 0; i < 12; ++i) {
    const absl::Duration delay = backoff.Next();
    EXPECT_GE(delay, d / 2) << i;
    EXPECT_LE(delay, d) << i;
    d = std::min(d * 2, absl::Seconds(30));
  }
  EXPECT_EQ(d, absl::Seconds(30));  // capped after 6 doublings
  backoff.Reset();
  const absl::Duration first = backoff.Next();
  EXPECT_GE(first, absl::Milliseconds(250));
  EXPECT_LE(first, absl::Milliseconds(500));
}

TEST(Backoff, JitterSpreadsTheDelays) {
  std::set<int64_t> delays;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Backoff backoff(absl::Seconds(1), absl::Seconds(1), seed);
    delays.insert(absl::ToInt64Milliseconds(backoff.Next()));
  }
  EXPECT_GT(delays.size(), 10u);  // not all in step
}

}  // namespace
}  // namespace gecd::route
