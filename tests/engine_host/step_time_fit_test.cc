#include "engine_host/step_time_fit.h"

#include "gtest/gtest.h"

namespace gecd::engine_host {
namespace {

TEST(StepTimeFitTest, NothingObservedIsUnknown) { EXPECT_FALSE(StepTimeFit().Fitted().known()); }

TEST(StepTimeFitTest, RecoversTheFixedAndPerSequenceParts) {
  StepTimeFit fit;
  // Steps of 6 ms + 0.25 ms per sequence, batch sizes varying as sequences come and go.
  for (int i = 0; i < 2000; ++i) {
    const int n = 1 + (i * 7) % 40;
    fit.Observe(n, n, 6000 + 250.0 * n + ((i % 2) != 0 ? 100 : -100));
  }
  const ipc::StepTime t = fit.Fitted();
  EXPECT_NEAR(t.fixed_us, 6000, 60);
  EXPECT_NEAR(t.per_sequence_us, 250, 5);
}

TEST(StepTimeFitTest, FollowsAMachineThatSlowsDown) {
  StepTimeFit fit(/*half_life_steps=*/100);
  for (int i = 0; i < 1000; ++i) fit.Observe(1 + i % 20, 1 + i % 20, 5000 + 200.0 * (1 + i % 20));
  for (int i = 0; i < 1000; ++i)
    fit.Observe(1 + i % 20, 1 + i % 20, 2 * (5000 + 200.0 * (1 + i % 20)));
  const ipc::StepTime t = fit.Fitted();
  EXPECT_NEAR(t.fixed_us, 10000, 200);
  EXPECT_NEAR(t.per_sequence_us, 400, 10);
}

TEST(StepTimeFitTest, AnUnvariedBatchSplitsTheStepInHalf) {
  StepTimeFit fit;
  for (int i = 0; i < 100; ++i) fit.Observe(8, 8, 8000);
  const ipc::StepTime t = fit.Fitted();
  EXPECT_FLOAT_EQ(t.fixed_us, 4000);
  EXPECT_FLOAT_EQ(t.per_sequence_us, 500);
}

TEST(StepTimeFitTest, NeitherPartIsNegative) {
  StepTimeFit noisy;
  // Larger batches measured faster (noise, or a machine speeding up): no negative slope.
  for (int i = 0; i < 200; ++i) noisy.Observe(1 + i % 10, 1 + i % 10, 10000 - 500.0 * (i % 10));
  EXPECT_GE(noisy.Fitted().per_sequence_us, 0);
  EXPECT_GE(noisy.Fitted().fixed_us, 0);
  StepTimeFit steep;
  // Steps that cost nothing fixed and more than proportionally: no negative intercept.
  for (int i = 0; i < 200; ++i)
    steep.Observe(1 + i % 10, 1 + i % 10, 100.0 * (1 + i % 10) * (1 + i % 10));
  EXPECT_GE(steep.Fitted().fixed_us, 0);
  EXPECT_GT(steep.Fitted().per_sequence_us, 0);
}

TEST(StepTimeFitTest, PrefillPositionsAreTheirOwnTermNotTheDecodingSteps) {
  // Decoding steps of 6 ms + 0.25 ms per sequence; every 10th step also prefills, at 20 µs a
  // position, ~30 positions for each sequence it runs (a whole text's sentences arrive at once
  // and make the batch).
  StepTimeFit fit;
  StepTimeFit sequences_only;  // what the fit on sequences alone made of the same steps
  for (int i = 0; i < 3000; ++i) {
    const int n = 1 + (i * 7) % 40;
    const int extra = i % 10 == 0 ? 30 * n : 0;
    const double t = 6000 + 250.0 * n + 20.0 * extra + ((i % 2) != 0 ? 100 : -100);
    fit.Observe(n, n + extra, t);
    sequences_only.Observe(n, n, t);
  }
  const ipc::StepTime t = fit.Fitted();
  EXPECT_NEAR(t.fixed_us, 6000, 60);
  EXPECT_NEAR(t.per_sequence_us, 250, 5);
  EXPECT_NEAR(fit.per_extra_token_us(), 20, 0.5);
  // The regression this term mends: prefill time read as a dearer decoding step.
  const ipc::StepTime blind = sequences_only.Fitted();
  EXPECT_GT(blind.fixed_us + 40 * blind.per_sequence_us, 1.05 * (6000 + 40 * 250.0));
}

TEST(StepTimeFitTest, ExtrasThatRiseWithTheSequencesAreLeftToThem) {
  // Every sequence verifies 3 drafts (speculative decoding at a fixed length): the extra
  // positions are 3n, indistinguishable from the sequences; the decoding line still fits.
  StepTimeFit fit;
  for (int i = 0; i < 1000; ++i) {
    const int n = 1 + i % 30;
    fit.Observe(n, 4 * n, 5000 + 400.0 * n);
  }
  const ipc::StepTime t = fit.Fitted();
  EXPECT_NEAR(t.fixed_us, 5000, 50);
  EXPECT_NEAR(t.per_sequence_us, 400, 5);
  EXPECT_EQ(fit.per_extra_token_us(), 0);
}

TEST(StepTimeFitTest, PrefillAloneWithAnUnvariedBatchStillSplitsTheDecodingStep) {
  StepTimeFit fit;
  for (int i = 0; i < 500; ++i) {
    const int extra = (i % 5) * 50;
    fit.Observe(8, 8 + extra, 8000 + 10.0 * extra);
  }
  const ipc::StepTime t = fit.Fitted();
  EXPECT_NEAR(t.fixed_us, 4000, 1);
  EXPECT_NEAR(t.per_sequence_us, 500, 0.1);
  EXPECT_NEAR(fit.per_extra_token_us(), 10, 0.01);
}

}  // namespace
}  // namespace gecd::engine_host
