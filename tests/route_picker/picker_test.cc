#include "route_picker/picker.h"

#include <array>
#include <functional>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::route {
namespace {

std::vector<int> Histogram(Picker& picker, const std::vector<Candidate>& c, int trials,
                           int exclude = -1) {
  std::vector<int> counts(c.size());
  for (int t = 0; t < trials; ++t) {
    const int i = picker.Pick(c, exclude);
    EXPECT_GE(i, 0);
    if (i >= 0) ++counts[i];
  }
  return counts;
}

TEST(PickerTest, P2cNeverPicksTheBusierOfItsTwoDraws) {
  SeedPickerThread(1);
  Picker p2c(Policy::kP2c);
  // Loads 0 < 1 < 2: the busiest can win no pair, and a draw of the same endpoint twice
  // (non-distinct draws) is the only way it could be picked.
  const std::vector<Candidate> c = {{.in_flight = 2}, {.in_flight = 0}, {.in_flight = 1}};
  const std::vector<int> counts = Histogram(p2c, c, 30000);
  EXPECT_EQ(counts[0], 0);
  // The idle one wins both pairs it is in (2 of 3), the middle one only the pair with the
  // busiest.
  EXPECT_NEAR(counts[1] / 30000.0, 2.0 / 3, 0.02);
  EXPECT_NEAR(counts[2] / 30000.0, 1.0 / 3, 0.02);
}

TEST(PickerTest, P2cIsUniformWhenIdle) {
  SeedPickerThread(2);
  Picker p2c(Policy::kP2c);
  const std::vector<Candidate> idle(10);
  const int trials = 100000;
  const std::vector<int> counts = Histogram(p2c, idle, trials);
  // Chi-square with 9 degrees of freedom: 27.9 is the 0.1% tail.
  double chi2 = 0;
  const double expected = trials / 10.0;
  for (int n : counts) chi2 += (n - expected) * (n - expected) / expected;
  EXPECT_LT(chi2, 27.9);
}

TEST(PickerTest, TwoEndpointsOnlyTheLessLoadedWins) {
  Picker p2c(Policy::kP2c);
  const std::vector<Candidate> c = {{.in_flight = 3}, {.in_flight = 2}};
  for (int t = 0; t < 1000; ++t) ASSERT_EQ(p2c.Pick(c), 1);
}

TEST(PickerTest, SlowStartWeightScalesTheLoad) {
  Picker p2c(Policy::kP2c);
  // (0 + 1) / 0.1 = 10 against (4 + 1) / 1 = 5: the endpoint in slow start takes a call only
  // from a peer with at least 10 in flight.
  std::vector<Candidate> c = {{.in_flight = 0, .weight = 0.1}, {.in_flight = 4, .weight = 1}};
  for (int t = 0; t < 1000; ++t) ASSERT_EQ(p2c.Pick(c), 1);
  c[1].in_flight = 10;
  for (int t = 0; t < 1000; ++t) ASSERT_EQ(p2c.Pick(c), 0);
}

TEST(PickerTest, ExcludeIsNeverPicked) {
  for (Policy policy : {Policy::kP2c, Policy::kLeastRequest, Policy::kRoundRobin}) {
    Picker picker(policy);
    const std::vector<Candidate> c = {{.in_flight = 0}, {.in_flight = 5}, {.in_flight = 9}};
    const std::vector<int> counts = Histogram(picker, c, 3000, /*exclude=*/0);
    EXPECT_EQ(counts[0], 0);
    EXPECT_GT(counts[1], 0);
    const std::vector<Candidate> one = {{}};
    EXPECT_EQ(picker.Pick(one, 0), -1);
    EXPECT_EQ(picker.Pick(std::vector<Candidate>{}), -1);
    EXPECT_EQ(picker.Pick(one), 0);
  }
}

TEST(PickerTest, LeastRequestPicksTheMinimumAndSpreadsTies) {
  SeedPickerThread(3);
  Picker least(Policy::kLeastRequest);
  const std::vector<Candidate> c = {
      {.in_flight = 3}, {.in_flight = 1}, {.in_flight = 7}, {.in_flight = 1}};
  const std::vector<int> counts = Histogram(least, c, 20000);
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[1] / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(counts[3] / 20000.0, 0.5, 0.02);
}

TEST(PickerTest, RoundRobinTakesEachInTurnBlindToLoad) {
  Picker rr(Policy::kRoundRobin);
  const std::vector<Candidate> c = {{.in_flight = 100}, {.in_flight = 0}, {.in_flight = 0}};
  std::vector<int> order;
  for (int t = 0; t < 6; ++t) order.push_back(rr.Pick(c));
  EXPECT_THAT(order, ::testing::ElementsAre(0, 1, 2, 0, 1, 2));
}

// A random source that replays `draws` and records the bound of each draw asked for.
struct ScriptedUniform {
  explicit ScriptedUniform(std::vector<int> d) : draws(std::move(d)) {}
  int operator()(int k) {
    bounds.push_back(k);
    const int d = draws.at(bounds.size() - 1);
    EXPECT_LT(d, k);
    return d;
  }
  std::vector<int> draws;
  std::vector<int> bounds;
};

TEST(PickerTest, ACallersSourceMakesEveryDraw) {
  const std::vector<Candidate> idle(4);
  auto candidate = [&](int i) { return idle[i]; };
  Picker p2c(Policy::kP2c);
  // Draws 2 and then 0 of the other 3 (endpoint 0); equal loads, so the coin's 1 takes the
  // second.
  ScriptedUniform source({2, 0, 1});
  EXPECT_EQ(p2c.Pick(4, candidate, -1, std::ref(source)), 0);
  EXPECT_THAT(source.bounds, ::testing::ElementsAre(4, 3, 2));
  // Excluding endpoint 1 leaves 0, 2, 3: the draws 1 and 1 (shifted past the first to 2) are
  // endpoints 2 and 3, and the coin's 0 takes the first.
  source = ScriptedUniform({1, 1, 0});
  EXPECT_EQ(p2c.Pick(4, candidate, 1, std::ref(source)), 2);
  EXPECT_THAT(source.bounds, ::testing::ElementsAre(3, 2, 2));

  // Least request over loads 2, 1, 1, 1: a draw for each tie after the first (reservoir).
  const std::vector<Candidate> c = {
      {.in_flight = 1}, {.in_flight = 0}, {.in_flight = 0}, {.in_flight = 0}};
  Picker least(Policy::kLeastRequest);
  source = ScriptedUniform({0, 1});
  auto loaded = [&](int i) { return c[i]; };
  EXPECT_EQ(least.Pick(4, loaded, -1, std::ref(source)), 2);
  EXPECT_THAT(source.bounds, ::testing::ElementsAre(2, 3));
}

TEST(PickerTest, ParsePolicyNamesTheKey) {
  EXPECT_EQ(*ParsePolicy("least_request"), Policy::kLeastRequest);
  EXPECT_THAT(ParsePolicy("random").status().message(), ::testing::HasSubstr("route.policy"));
}

}  // namespace
}  // namespace gecd::route
