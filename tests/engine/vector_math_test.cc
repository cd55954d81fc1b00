#include "engine/vector_math.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/vector_clones.h"
#include "gtest/gtest.h"

namespace gecd::engine {
namespace {

// Distance in units of the last place between two finite floats of the same sign.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, sizeof(ia));
  std::memcpy(&ib, &b, sizeof(ib));
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

TEST(ExpApproxTest, WithinTwoUlpOfExpOverItsRange) {
  int64_t worst = 0;
  float worst_x = 0.0f;
  for (double x = -87.33; x <= 88.37; x += 1e-3) {
    const float xf = static_cast<float>(x);
    const int64_t d = UlpDistance(ExpApprox(xf), static_cast<float>(std::exp(double{xf})));
    if (d > worst) worst = d, worst_x = xf;
  }
  EXPECT_LE(worst, 2) << "at x = " << worst_x;
}

TEST(ExpApproxTest, EdgesOfItsRange) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ExpApprox(0.0f), 1.0f);
  EXPECT_EQ(ExpApprox(-0.0f), 1.0f);
  EXPECT_EQ(ExpApprox(-inf), 0.0f);
  EXPECT_EQ(ExpApprox(-100.0f), 0.0f);  // e^x subnormal or below: 0
  EXPECT_EQ(ExpApprox(inf), inf);
  EXPECT_EQ(ExpApprox(100.0f), inf);
  EXPECT_TRUE(std::isnan(ExpApprox(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_GT(ExpApprox(88.3f), 1e38f);
  EXPECT_LT(ExpApprox(88.3f), inf);
  EXPECT_GT(ExpApprox(-87.3f), 0.0f);
}

// The loops that call it are compiled for AVX-512/AVX2/baseline: each copy computes the bits
// the scalar function does (no fused multiply-adds: the engine builds with -ffp-contract=off,
// and so does this test's target).
GECD_VECTOR_CLONES void ExpAll(const float* __restrict x, int n, float* __restrict y) {
  for (int i = 0; i < n; ++i) y[i] = ExpApprox(x[i]);
}

TEST(ExpApproxTest, AVectorLoopComputesTheScalarBits) {
  std::vector<float> x;
  for (int i = 0; i < 4096; ++i) x.push_back(-90.0f + 180.0f * static_cast<float>(i) / 4096.0f);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  std::vector<float> y(x.size());
  ExpAll(x.data(), static_cast<int>(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = ExpApprox(x[i]);
    EXPECT_EQ(std::memcmp(&y[i], &want, sizeof(float)), 0) << "x = " << x[i];
  }
}

}  // namespace
}  // namespace gecd::engine
