#include "fleet_sim/fleet_sim.h"

#include <map>

#include "gtest/gtest.h"

namespace gecd::fleet_sim {
namespace {

// The fleet of docs/ROUTING.md: the CPU calibration scaled to 1,050 req/s a pod.
FleetOptions Fleet(Policy policy, double utilisation) {
  FleetOptions options;
  options.model = CpuCalibratedPodModel();
  options.model = options.model.Scaled(options.model.Capacity() / 1050);
  options.policy = policy;
  options.rate_rps = utilisation * FleetCapacity(options);
  options.warmup_requests = 10'000;
  options.measured_requests = 60'000;
  return options;
}

FleetResult Simulate(const FleetOptions& options) {
  absl::StatusOr<FleetResult> result = RunFleet(options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : FleetResult{};
}

TEST(FleetSimTest, SingleSlotPodIsAnMD1Queue) {
  // Batch 1 and a constant step: each request is served alone for steps_per_request * step,
  // one after the other, so the pod is an M/D/1 queue: mean wait rho D / (2 (1 - rho)).
  FleetOptions options;
  options.pods = 1;
  options.slow_fraction = 0;
  options.model.step_fixed_s = 1e-3;
  options.model.decode_token_s = 0;
  options.model.prompt_token_s = 0;
  options.model.max_batch = 1;
  options.model.steps_per_request = 10;
  options.warmup_requests = 5'000;
  options.measured_requests = 200'000;
  const double service = 10e-3;
  ASSERT_NEAR(FleetCapacity(options), 1 / service, 1e-9);
  for (double rho : {0.5, 0.8}) {
    options.rate_rps = rho / service;
    const FleetResult r = Simulate(options);
    const double expected = service + rho * service / (2 * (1 - rho));
    EXPECT_NEAR(r.mean_s, expected, 0.03 * expected) << "rho " << rho;
    EXPECT_GE(r.p50_s, service * (1 - 1e-9));  // nobody is served faster than D
    EXPECT_NEAR(r.throughput_rps, options.rate_rps, 0.02 * options.rate_rps);
  }
}

TEST(FleetSimTest, FullPodServesItsCapacity) {
  // Offered twice what it serves, a pod runs full batches: it finishes requests at the rate
  // Capacity() predicts, the denominator of every utilisation in the sweep.
  FleetOptions options;
  options.pods = 1;
  options.slow_fraction = 0;
  options.model = CpuCalibratedPodModel();
  options.rate_rps = 2 * options.model.Capacity();
  options.warmup_requests = 1'000;
  options.measured_requests = 20'000;
  const FleetResult r = Simulate(options);
  EXPECT_NEAR(r.throughput_rps, options.model.Capacity(), 0.02 * options.model.Capacity());
  EXPECT_NEAR(r.mean_batch, 128, 1);
}

TEST(FleetSimTest, AtLowLoadAllPoliciesAgree) {
  // At 2% of capacity nearly every request has a pod to itself whatever the policy, so the
  // median is the unloaded service time; only random's tail is a little longer (the requests
  // that meet another on a pod share its steps).
  std::map<Policy, FleetResult> results;
  for (Policy p : {Policy::kRoundRobin, Policy::kRandom, Policy::kP2C, Policy::kLeastRequest}) {
    FleetOptions options = Fleet(p, 0.02);
    options.slow_fraction = 0;
    results[p] = Simulate(options);
  }
  const FleetResult& rr = results[Policy::kRoundRobin];
  for (const auto& [policy, r] : results) {
    EXPECT_NEAR(r.p50_s, rr.p50_s, 0.01 * rr.p50_s) << PolicyName(policy);
    EXPECT_NEAR(r.p99_s, rr.p99_s, 0.3 * rr.p99_s) << PolicyName(policy);
  }
}

TEST(FleetSimTest, AtHighLoadP2CAvoidsTheSlowPods) {
  const FleetResult rr = Simulate(Fleet(Policy::kRoundRobin, 0.9));
  const FleetResult random = Simulate(Fleet(Policy::kRandom, 0.9));
  const FleetResult p2c = Simulate(Fleet(Policy::kP2C, 0.9));
  const FleetResult least = Simulate(Fleet(Policy::kLeastRequest, 0.9));
  // Round robin and random give the 10 slow pods 5% of the requests, more than they serve.
  EXPECT_NEAR(rr.slow_share, 0.05, 0.001);
  EXPECT_GT(rr.p99_s, 3 * p2c.p99_s);
  EXPECT_GT(random.p99_s, 3 * p2c.p99_s);
  // p2c and least request send them about their share of the capacity (0.5 / 195 each).
  EXPECT_LT(p2c.slow_share, 0.035);
  EXPECT_LT(least.slow_share, 0.035);
  EXPECT_LE(least.p99_s, p2c.p99_s * 1.05);
  EXPECT_TRUE(OverloadsSlowestPod(Fleet(Policy::kRoundRobin, 0.9)));
  EXPECT_FALSE(OverloadsSlowestPod(Fleet(Policy::kP2C, 0.9)));
}

TEST(FleetSimTest, P2CStillWinsWithRoutersThatSeeOnlyTheirOwnRequests) {
  FleetOptions rr = Fleet(Policy::kRoundRobin, 0.9);
  FleetOptions p2c = Fleet(Policy::kP2C, 0.9);
  rr.routers = p2c.routers = 8;
  EXPECT_GT(Simulate(rr).p99_s, 3 * Simulate(p2c).p99_s);
}

TEST(FleetSimTest, RoundRobinIsBoundedBelowTheSlowPodsCapacity) {
  // Slow pods serve 525 req/s: a share of 200 pods' traffic below that is 0.51 of capacity.
  EXPECT_FALSE(OverloadsSlowestPod(Fleet(Policy::kRoundRobin, 0.5)));
  EXPECT_TRUE(OverloadsSlowestPod(Fleet(Policy::kRandom, 0.52)));
}

TEST(FleetSimTest, SameSeedSameRun) {
  FleetOptions options = Fleet(Policy::kP2C, 0.7);
  options.measured_requests = 20'000;
  const FleetResult a = Simulate(options);
  const FleetResult b = Simulate(options);
  EXPECT_EQ(a.p99_s, b.p99_s);
  EXPECT_EQ(a.max_s, b.max_s);
  EXPECT_EQ(a.mean_s, b.mean_s);
  options.seed = 2;
  EXPECT_NE(Simulate(options).mean_s, a.mean_s);
}

TEST(FleetSimTest, BadOptionsNameTheField) {
  FleetOptions options = Fleet(Policy::kP2C, 0.5);
  options.pods = 0;
  EXPECT_NE(RunFleet(options).status().message().find("pods"), std::string::npos);
  options = Fleet(Policy::kP2C, 0.5);
  options.rate_rps = 0;
  EXPECT_NE(RunFleet(options).status().message().find("rate_rps"), std::string::npos);
  options = Fleet(Policy::kP2C, 0.5);
  options.model.steps_per_request = 0;
  EXPECT_NE(RunFleet(options).status().message().find("steps_per_request"), std::string::npos);
}

}  // namespace
}  // namespace gecd::fleet_sim
