#include "common/numerics.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace gecd {
namespace {

TEST(E4m3, DecodesKnownCodes) {
  EXPECT_EQ(E4m3ToFloat(0x00), 0.0f);
  EXPECT_EQ(E4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(E4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0xfe), -448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(E4m3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7f)));
}

TEST(E4m3, EveryFiniteCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    const float v = E4m3ToFloat(static_cast<uint8_t>(code));
    if (code == 0x80) {
      EXPECT_EQ(FloatToE4m3(v), 0x80);  // -0 keeps its sign
      continue;
    }
    EXPECT_EQ(FloatToE4m3(v), code) << "value " << v;
  }
}

TEST(E4m3, RoundsToNearestEvenAndSaturates) {
  // Between 1.0 (0x38) and 1.125 (0x39) the tie goes to the even mantissa.
  EXPECT_EQ(FloatToE4m3(1.0625f), 0x38);
  EXPECT_EQ(FloatToE4m3(1.0626f), 0x39);
  // Between 1.125 (0x39) and 1.25 (0x3a): tie goes up to even 0x3a.
  EXPECT_EQ(FloatToE4m3(1.1875f), 0x3a);
  EXPECT_EQ(FloatToE4m3(1000.0f), 0x7e);
  EXPECT_EQ(FloatToE4m3(-1e30f), 0xfe);
  EXPECT_EQ(FloatToE4m3(std::ldexp(1.0f, -11)), 0x00);  // a quarter step rounds to zero
}

TEST(E4m3, MatchesBruteForceNearest) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-500.0f, 500.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = i % 2 ? dist(rng) : dist(rng) / 1000.0f;
    const float clamped = std::fmax(-448.0f, std::fmin(448.0f, x));
    const float got = E4m3ToFloat(FloatToE4m3(x));
    float best = 0.0f, best_err = INFINITY;
    for (int code = 0; code < 256; ++code) {
      const float v = E4m3ToFloat(static_cast<uint8_t>(code));
      if (std::isnan(v)) continue;
      const float err = std::fabs(v - clamped);
      if (err < best_err) best = v, best_err = err;
    }
    EXPECT_EQ(std::fabs(got - clamped), best_err) << x << " -> " << got << " best " << best;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between 1.0 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
}

TEST(F16, ConvertsNormalsSubnormalsAndOverflow) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(F16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));
  for (uint32_t code = 0; code < 0x7c00; ++code) {
    EXPECT_EQ(FloatToF16(F16ToFloat(static_cast<uint16_t>(code))), code);
  }
}

TEST(QuantizeRows, ScaleIsRowMaxOver448AndZeroRowsStayZero) {
  const float x[6] = {1.0f, -4.0f, 2.0f, 0.0f, 0.0f, 0.0f};
  float q[6], scales[2];
  QuantizeRowsE4m3(x, 2, 3, q, scales);
  EXPECT_FLOAT_EQ(scales[0], 4.0f / 448.0f);
  EXPECT_EQ(scales[1], kMinFp8Scale);
  EXPECT_FLOAT_EQ(q[1] * scales[0], -4.0f);
  EXPECT_EQ(q[3], 0.0f);
  uint8_t codes[6];
  float scales2[2];
  QuantizeRowsE4m3Codes(x, 2, 3, codes, scales2);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(E4m3ToFloat(codes[i]), q[i]);
}

}  // namespace
}  // namespace gecd
