// Int8Matmul against the f32 product it approximates: exact where the quantization is
// lossless, within the error bound of symmetric int8 rounding otherwise, at odd sizes and at
// every row class boundary; and its refusals.
#include "cpu_matmul/int8_matmul.h"

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::cpu_matmul {
namespace {

using ::testing::HasSubstr;

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

float RowScale(const float* v, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  return amax > 0.0f ? amax / 127.0f : 1.0f;
}

struct Case {
  int out, in, rows;
};

// Runs one product and checks every output against the f32 (double) product: rounding x and
// w to the nearest multiple of their scales moves each by at most half a scale, so
// |y - ref| <= sum_k (|x_k| sw/2 + |w_k| sx/2 + sx sw/4), plus f32 rounding of the epilogue.
// Returns the largest error seen relative to that bound.
double CheckAgainstF32(const Case& c, bool with_bias, bool accumulate, uint32_t seed) {
  const std::vector<float> w = Random(static_cast<size_t>(c.out) * c.in, seed);
  const std::vector<float> x = Random(static_cast<size_t>(c.rows) * c.in, seed + 1, 3.0f);
  const std::vector<float> bias = with_bias ? Random(c.out, seed + 2) : std::vector<float>();
  const std::vector<float> y0 = Random(static_cast<size_t>(c.rows) * c.out, seed + 3);
  absl::StatusOr<std::unique_ptr<Int8Matmul>> m =
      Int8Matmul::Create("test", w, bias, c.out, c.in, c.rows);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return 0.0;
  Int8Scratch scratch;
  scratch.Reserve(c.rows, c.in, c.out);
  std::vector<float> y = accumulate ? y0 : std::vector<float>(y0.size(), -1.0f);
  (*m)->Apply(x.data(), c.rows, y.data(), accumulate, &scratch);
  double worst = 0.0;
  for (int t = 0; t < c.rows; ++t) {
    const float* xr = x.data() + static_cast<size_t>(t) * c.in;
    const float sx = RowScale(xr, c.in);
    for (int o = 0; o < c.out; ++o) {
      const float* wr = w.data() + static_cast<size_t>(o) * c.in;
      const float sw = (*m)->weight_scales()[o];
      EXPECT_FLOAT_EQ(sw, RowScale(wr, c.in));
      double ref = 0.0, bound = 0.0, magnitude = 0.0;
      for (int k = 0; k < c.in; ++k) {
        ref += static_cast<double>(xr[k]) * wr[k];
        bound += std::fabs(xr[k]) * sw / 2 + std::fabs(wr[k]) * sx / 2 + sx * sw / 4;
        magnitude += std::fabs(xr[k] * wr[k]);
      }
      if (with_bias) ref += bias[o];
      if (accumulate) ref += y0[static_cast<size_t>(t) * c.out + o];
      bound += 1e-5 * (magnitude + std::fabs(ref));
      const double err = std::fabs(y[static_cast<size_t>(t) * c.out + o] - ref);
      EXPECT_LE(err, bound) << "out " << o << " row " << t << " of [" << c.out << ", " << c.in
                            << "] x " << c.rows;
      worst = std::max(worst, err / bound);
    }
  }
  return worst;
}

TEST(Int8MatmulTest, IntegerInputsWithFullRangeRowsAreExact) {
  // Every row reaches 127, so both scales are 1 and the int8 product is the f32 one exactly.
  const int out = 5, in = 9, rows = 3;
  std::vector<float> w(out * in), x(rows * in);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dist(-127, 127);
  for (float& v : w) v = static_cast<float>(dist(rng));
  for (float& v : x) v = static_cast<float>(dist(rng));
  for (int o = 0; o < out; ++o) w[o * in + o % in] = (o % 2 != 0) ? 127.0f : -127.0f;
  for (int t = 0; t < rows; ++t) x[t * in + 2 * t] = 127.0f;
  auto m = Int8Matmul::Create("exact", w, {}, out, in, rows);
  ASSERT_TRUE(m.ok()) << m.status();
  Int8Scratch scratch;
  scratch.Reserve(rows, in, out);
  std::vector<float> y(rows * out);
  (*m)->Apply(x.data(), rows, y.data(), /*accumulate=*/false, &scratch);
  for (int t = 0; t < rows; ++t) {
    for (int o = 0; o < out; ++o) {
      float ref = 0.0f;
      for (int k = 0; k < in; ++k) ref += x[t * in + k] * w[o * in + k];
      EXPECT_EQ(y[t * out + o], ref) << t << ", " << o;
    }
  }
}

TEST(Int8MatmulTest, OddSizesMatchF32WithinTheRoundingBound) {
  // No size here is a multiple of a SIMD width or a kernel tile.
  for (const Case& c : {Case{7, 13, 3}, Case{1, 1, 1}, Case{33, 65, 17}, Case{130, 31, 5}}) {
    CheckAgainstF32(c, /*with_bias=*/false, /*accumulate=*/false, 11);
    CheckAgainstF32(c, /*with_bias=*/true, /*accumulate=*/true, 12);
  }
}

TEST(Int8MatmulTest, EveryRowClassBoundaryMatchesF32) {
  // The default model's shapes (qkv 512x256, down 256x768) at rows on both sides of each
  // change of row class step.
  for (int rows : {1, 2, 8, 9, 127, 128, 129, 512, 513, 640}) {
    CheckAgainstF32({512, 256, rows}, /*with_bias=*/false, /*accumulate=*/false, rows);
  }
  CheckAgainstF32({256, 768, 130}, /*with_bias=*/true, /*accumulate=*/true, 5);
}

TEST(Int8MatmulTest, TheErrorIsTheQuantizationsNotNoise) {
  // Random data uses a real share of the bound (the path quantizes) yet stays inside it.
  const double worst = CheckAgainstF32({64, 256, 16}, false, false, 3);
  EXPECT_GT(worst, 0.01);
  EXPECT_LE(worst, 1.0);
}

TEST(Int8MatmulTest, OneMatmulServesFewerRowsThanItsMaximum) {
  const int out = 24, in = 40;
  const std::vector<float> w = Random(out * in, 1);
  auto m = Int8Matmul::Create("rows", w, {}, out, in, /*max_rows=*/300);
  ASSERT_TRUE(m.ok()) << m.status();
  Int8Scratch scratch;
  scratch.Reserve(300, in, out);
  for (int rows : {300, 1, 37, 300}) {
    const std::vector<float> x = Random(rows * in, rows);
    std::vector<float> y(rows * out), single(out);
    (*m)->Apply(x.data(), rows, y.data(), false, &scratch);
    // Each row alone gives the same bits: a row's result does not depend on its batch.
    for (int t = 0; t < rows; t += 17) {
      (*m)->Apply(x.data() + t * in, 1, single.data(), false, &scratch);
      for (int o = 0; o < out; ++o) EXPECT_EQ(y[t * out + o], single[o]) << rows << " " << t;
    }
  }
}

TEST(Int8MatmulTest, AZeroWeightRowGivesItsBias) {
  const int out = 3, in = 16;
  std::vector<float> w = Random(out * in, 2);
  std::fill(w.begin() + in, w.begin() + 2 * in, 0.0f);
  const std::vector<float> bias = {0.5f, -2.0f, 1.0f};
  auto m = Int8Matmul::Create("zero", w, bias, out, in, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->weight_scales()[1], 1.0f);
  Int8Scratch scratch;
  scratch.Reserve(4, in, out);
  const std::vector<float> x = Random(4 * in, 3);
  std::vector<float> y(4 * out);
  (*m)->Apply(x.data(), 4, y.data(), false, &scratch);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(y[t * out + 1], -2.0f);
}

TEST(Int8MatmulTest, ANonFiniteActivationRowPoisonsOnlyItsOwnOutputs) {
  const int out = 8, in = 32;
  const std::vector<float> w = Random(out * in, 4);
  auto m = Int8Matmul::Create("nan", w, {}, out, in, 3);
  ASSERT_TRUE(m.ok()) << m.status();
  Int8Scratch scratch;
  scratch.Reserve(3, in, out);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = Random(3 * in, 5);
    x[in + 4] = bad;
    std::vector<float> y(3 * out);
    (*m)->Apply(x.data(), 3, y.data(), false, &scratch);
    for (int o = 0; o < out; ++o) {
      EXPECT_TRUE(std::isfinite(y[o]));
      EXPECT_FALSE(std::isfinite(y[out + o])) << bad;
      EXPECT_TRUE(std::isfinite(y[2 * out + o]));
    }
  }
}

TEST(Int8MatmulTest, NonFiniteWeightsAreRefusedNamingTheRow) {
  std::vector<float> w = Random(4 * 8, 6);
  w[2 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
  auto m = Int8Matmul::Create("model.layers.0.mlp.down_proj", w, {}, 4, 8, 2);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("model.layers.0.mlp.down_proj: weight row 2"));
  w[2 * 8 + 3] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(Int8Matmul::Create("inf", w, {}, 4, 8, 2).ok());
}

TEST(Int8MatmulTest, SizesThatDoNotAddUpAreRefused) {
  const std::vector<float> w = Random(4 * 8, 6);
  for (auto [out, in, rows, bias] : {std::tuple{4, 7, 2, 0}, std::tuple{4, 8, 0, 0},
                                     std::tuple{4, 8, 2, 3}, std::tuple{0, 8, 2, 0}}) {
    const std::vector<float> b(bias, 1.0f);
    auto m = Int8Matmul::Create("shape", w, b, out, in, rows);
    ASSERT_FALSE(m.ok()) << out << " " << in << " " << rows << " " << bias;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(m.status().message(), HasSubstr("shape: "));
  }
}

}  // namespace
}  // namespace gecd::cpu_matmul
