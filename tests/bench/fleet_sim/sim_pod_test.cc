#include "fleet_sim/sim_pod.h"

#include <vector>

#include "gtest/gtest.h"

namespace gecd::fleet_sim {
namespace {

PodModel SmallModel() {
  PodModel model;
  model.step_fixed_s = 1;
  model.decode_token_s = 0.5;
  model.prompt_token_s = 0.01;
  model.max_batch = 2;
  model.max_step_tokens = 2048;
  model.steps_per_request = 2;
  model.prompt_tokens = 10;
  return model;
}

TEST(SimPodTest, JoinsAtStepBoundariesUpToTheBatchCap) {
  const PodModel model = SmallModel();
  ASSERT_TRUE(model.Validate().ok());
  SimPod pod(model, 1.0);
  std::vector<SimRequest> done;
  // An idle pod starts a step at once; the others wait for its end.
  EXPECT_TRUE(pod.Enqueue({0.0, 0, true}, 0.0));
  EXPECT_FALSE(pod.Enqueue({0.1, 0, true}, 0.1));
  EXPECT_FALSE(pod.Enqueue({0.2, 0, true}, 0.2));
  EXPECT_EQ(pod.in_flight(), 3);
  EXPECT_DOUBLE_EQ(pod.step_end(), 1 + 0.01 * 10);  // the first prefills alone

  // Step 2: the first decodes, the second joins; the batch cap (2) keeps the third out.
  ASSERT_TRUE(pod.EndStep(&done));
  EXPECT_TRUE(done.empty());
  EXPECT_DOUBLE_EQ(pod.step_end(), 1.1 + (1 + 0.5 + 0.1));
  // Step 3: the first has had its two steps; the third joins.
  ASSERT_TRUE(pod.EndStep(&done));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].arrival_s, 0.0);
  EXPECT_EQ(pod.in_flight(), 2);
  EXPECT_DOUBLE_EQ(pod.step_end(), 2.7 + 1.6);
  ASSERT_TRUE(pod.EndStep(&done));
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].arrival_s, 0.1);
  EXPECT_DOUBLE_EQ(pod.step_end(), 4.3 + 1.5);  // the third decodes alone
  EXPECT_FALSE(pod.EndStep(&done));
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[2].arrival_s, 0.2);
  EXPECT_FALSE(pod.busy());
  EXPECT_EQ(pod.in_flight(), 0);
  EXPECT_EQ(pod.steps(), 4u);
  EXPECT_EQ(pod.batched_sequences(), 1u + 2 + 2 + 1);
}

TEST(SimPodTest, TokenBudgetLimitsWhoJoinsAStep) {
  PodModel model = SmallModel();
  model.max_batch = 8;
  model.steps_per_request = 8;
  model.max_step_tokens = 25;  // one decode + two prompts of 10
  ASSERT_TRUE(model.Validate().ok());
  SimPod pod(model, 1.0);
  std::vector<SimRequest> done;
  for (int i = 0; i < 5; ++i) pod.Enqueue({0.0, 0, false}, 0.0);
  ASSERT_TRUE(pod.EndStep(&done));
  EXPECT_DOUBLE_EQ(pod.step_end(), 1.1 + (1 + 0.5 + 2 * 0.1));
  EXPECT_EQ(pod.batched_sequences(), 1u + 3);
}

TEST(SimPodTest, SlowdownMultipliesEveryStep) {
  SimPod pod(SmallModel(), 2.0);
  pod.Enqueue({0.0, 0, false}, 0.0);
  EXPECT_DOUBLE_EQ(pod.step_end(), 2 * 1.1);
}

TEST(SimPodTest, CapacityIsAFullBatchInSteadyState) {
  const PodModel model = CpuCalibratedPodModel();
  ASSERT_TRUE(model.Validate().ok());
  // 128 / 50 requests finish per step of 2.318 + 0.2368 * 125.44 + 0.173 * 128 ms.
  EXPECT_NEAR(model.Capacity(), 47.3, 0.1);
  EXPECT_NEAR(model.Scaled(0.5).Capacity(), 2 * model.Capacity(), 1e-9);
}

TEST(SimPodTest, ValidateNamesTheField) {
  PodModel model = CpuCalibratedPodModel();
  model.max_batch = 0;
  EXPECT_NE(model.Validate().message().find("max_batch"), std::string::npos);
  model = CpuCalibratedPodModel();
  model.max_step_tokens = 200;  // a full batch's steady state needs 254
  EXPECT_NE(model.Validate().message().find("max_step_tokens"), std::string::npos);
  model = CpuCalibratedPodModel();
  model.decode_token_s = -1;
  EXPECT_NE(model.Validate().message().find("decode_token_s"), std::string::npos);
}

}  // namespace
}  // namespace gecd::fleet_sim
