#include "fleet_sim/sim_random.h"

#include <vector>

#include "gtest/gtest.h"

namespace gecd::fleet_sim {
namespace {

TEST(SimRandomTest, PoissonArrivalsHaveTheRate) {
  SimRandom random(StreamSeed(7, 1));
  const double rate = 2000;
  const int n = 200'000;
  double t = 0;
  double sum_sq = 0;
  // Arrivals counted in 10 ms windows: a Poisson process gives mean = variance = 20.
  std::vector<int> windows(static_cast<size_t>(n / rate / 0.01) + 2, 0);
  for (int i = 0; i < n; ++i) {
    const double gap = random.Exponential(rate);
    ASSERT_GT(gap, 0);
    t += gap;
    sum_sq += gap * gap;
    if (t < 0.01 * (windows.size() - 1)) ++windows[static_cast<size_t>(t / 0.01)];
  }
  EXPECT_NEAR(n / t, rate, rate * 0.01);
  const double mean_gap = t / n;
  EXPECT_NEAR(sum_sq / n - mean_gap * mean_gap, 1 / (rate * rate), 0.03 / (rate * rate));
  windows.pop_back();  // the window the last arrival fell short of
  double mean = 0;
  for (int w : windows) mean += w;
  mean /= windows.size();
  double var = 0;
  for (int w : windows) var += (w - mean) * (w - mean);
  var /= windows.size() - 1;
  EXPECT_NEAR(mean, 20, 0.4);
  EXPECT_NEAR(var / mean, 1, 0.07);
}

TEST(SimRandomTest, BelowIsUniformAndInRange) {
  SimRandom random(3);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70'000; ++i) {
    const uint32_t v = random.Below(7);
    ASSERT_LT(v, 7u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_NEAR(c, 10'000, 400);
}

TEST(SimRandomTest, StreamsAreReproducibleAndDistinct) {
  SimRandom a(StreamSeed(1, 1));
  SimRandom b(StreamSeed(1, 1));
  SimRandom c(StreamSeed(1, 2));
  int same_as_c = 0;
  for (int i = 0; i < 100; ++i) {
    const double x = a.Uniform();
    EXPECT_EQ(x, b.Uniform());
    same_as_c += x == c.Uniform();
  }
  EXPECT_EQ(same_as_c, 0);
}

}  // namespace
}  // namespace gecd::fleet_sim
