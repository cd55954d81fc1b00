#include "fleet_sim/sim_router.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "route_picker/picker.h"

namespace gecd::fleet_sim {
namespace {

std::vector<int> PickCounts(SimRouter& router, const std::vector<int>& in_flight, int picks) {
  std::vector<int> counts(in_flight.size(), 0);
  for (int i = 0; i < picks; ++i) {
    const int pick = router.Pick(in_flight);
    EXPECT_GE(pick, 0);
    EXPECT_LT(pick, static_cast<int>(in_flight.size()));
    ++counts[pick];
  }
  return counts;
}

TEST(SimRouterTest, RoundRobinVisitsEveryPodInTurnFromTheFirst) {
  SimRouter router(Policy::kRoundRobin, 5, 11);
  const std::vector<int> in_flight = {9, 0, 0, 0, 0};  // ignored
  for (int i = 0; i < 10; ++i) EXPECT_EQ(router.Pick(in_flight), i % 5);
}

TEST(SimRouterTest, RandomIsUniformWhateverTheCounts) {
  SimRouter router(Policy::kRandom, 4, 5);
  for (int c : PickCounts(router, {0, 100, 0, 100}, 40'000)) EXPECT_NEAR(c, 10'000, 400);
}

TEST(SimRouterTest, P2CNeverPicksTheBusierOfItsTwo) {
  SimRouter two(Policy::kP2C, 2, 1);
  EXPECT_EQ(PickCounts(two, {3, 1}, 1000), (std::vector<int>{0, 1000}));
  // Distinct counts: the pod of rank k (1 = fewest) wins when it is drawn and the other pod
  // is busier, probability 2 (n - k) / (n (n - 1)); the busiest pod is never picked.
  SimRouter five(Policy::kP2C, 5, 2);
  const std::vector<int> in_flight = {4, 0, 3, 1, 2};
  const std::vector<int> counts = PickCounts(five, in_flight, 100'000);
  for (int pod = 0; pod < 5; ++pod) {
    const int rank = in_flight[pod] + 1;
    EXPECT_NEAR(counts[pod] / 1e5, 2.0 * (5 - rank) / 20, 0.01) << "pod " << pod;
  }
  EXPECT_EQ(counts[0], 0);
}

TEST(SimRouterTest, P2CBreaksTiesByACoin) {
  SimRouter router(Policy::kP2C, 2, 3);
  for (int c : PickCounts(router, {2, 2}, 10'000)) EXPECT_NEAR(c, 5'000, 300);
}

TEST(SimRouterTest, LeastRequestPicksAMinimumTiesUniformly) {
  SimRouter router(Policy::kLeastRequest, 6, 4);
  const std::vector<int> counts = PickCounts(router, {3, 1, 4, 1, 5, 1}, 30'000);
  for (int pod : {0, 2, 4}) EXPECT_EQ(counts[pod], 0) << "pod " << pod;
  for (int pod : {1, 3, 5}) EXPECT_NEAR(counts[pod], 10'000, 400) << "pod " << pod;
  SimRouter unique(Policy::kLeastRequest, 4, 4);
  EXPECT_EQ(PickCounts(unique, {2, 7, 0, 1}, 100), (std::vector<int>{0, 0, 100, 0}));
}

// The simulated policies are the router's own: the same picks as a route::Picker drawing from
// the same seeded stream, whatever the counts.
TEST(SimRouterTest, PicksAsTheShippedPickerFromTheSameStream) {
  const std::pair<Policy, route::Policy> policies[] = {
      {Policy::kRoundRobin, route::Policy::kRoundRobin},
      {Policy::kP2C, route::Policy::kP2c},
      {Policy::kLeastRequest, route::Policy::kLeastRequest}};
  for (const auto& [policy, shipped] : policies) {
    SimRouter router(policy, 7, 9);
    route::Picker picker(shipped);
    SimRandom stream(9);
    SimRandom counts(1);
    std::vector<int> in_flight(7);
    for (int t = 0; t < 2000; ++t) {
      for (int& c : in_flight) c = static_cast<int>(counts.Below(4));
      const int want = picker.Pick(
          7, [&](int i) { return route::Candidate{.in_flight = in_flight[i]}; }, -1,
          [&](int k) { return static_cast<int>(stream.Below(k)); });
      ASSERT_EQ(router.Pick(in_flight), want) << PolicyName(policy) << " pick " << t;
    }
  }
}

TEST(SimRouterTest, PolicyNamesRoundTrip) {
  for (Policy p : {Policy::kRoundRobin, Policy::kRandom, Policy::kP2C, Policy::kLeastRequest}) {
    absl::StatusOr<Policy> parsed = ParsePolicy(PolicyName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  absl::StatusOr<Policy> bad = ParsePolicy("least_loaded");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'least_loaded'"), std::string::npos);
}

}  // namespace
}  // namespace gecd::fleet_sim
