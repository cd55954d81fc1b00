// Matmul, int8 and bf16, against the f32 product it approximates: exact where the rounding is
// lossless, within the error bound of its rounding otherwise (int8: symmetric per-row
// quantization; bf16: round to nearest even of every operand), at odd sizes and at every row
// class boundary; and its refusals. The bf16 cases skip on a CPU without BF16 dot products
// (AVX512-BF16 or AMX-BF16), and the int8 ones on a CPU without VNNI, where the engine never runs
// them (and int8 is refused: a test below).
#include "cpu_matmul/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/numerics.h"
#include "cpu_matmul/cpu_isa.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cpu_features.h"

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
  absl::StatusOr<std::unique_ptr<Matmul>> m =
      Matmul::Create(Precision::kInt8, "test", w, bias, c.out, c.in, c.rows);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return 0.0;
  MatmulScratch scratch;
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

// Sizes that no SIMD width or kernel tile divides, each plain and with bias and accumulation.
template <typename Check>
void CheckOddSizes(Check check) {
  for (const Case& c : {Case{7, 13, 3}, Case{1, 1, 1}, Case{33, 65, 17}, Case{130, 31, 5}}) {
    check(c, /*with_bias=*/false, /*accumulate=*/false, 11);
    check(c, /*with_bias=*/true, /*accumulate=*/true, 12);
  }
}

// The default model's shapes (qkv 512x256, down 256x768) at rows on both sides of each change
// of row class step.
template <typename Check>
void CheckRowClassBoundaries(Check check) {
  for (int rows : {1, 2, 8, 9, 127, 128, 129, 512, 513, 640}) {
    check({512, 256, rows}, /*with_bias=*/false, /*accumulate=*/false, rows);
  }
  check({256, 768, 130}, /*with_bias=*/true, /*accumulate=*/true, 5);
}

// Integer operands in [-range, range] (seeded 7), with `setup` free to change them: the
// product in `precision` must equal the f32 one, summed in k order, exactly.
template <typename Setup>
void ExpectExactProduct(Precision precision, int out, int in, int rows, int range, Setup setup) {
  std::vector<float> w(out * in), x(rows * in);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dist(-range, range);
  for (float& v : w) v = static_cast<float>(dist(rng));
  for (float& v : x) v = static_cast<float>(dist(rng));
  setup(w, x);
  auto m = Matmul::Create(precision, "exact", w, {}, out, in, rows);
  ASSERT_TRUE(m.ok()) << m.status();
  MatmulScratch scratch;
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

#define SKIP_WITHOUT_BF16()                            \
  if (!::gecd::testing::CpuHasBf16()) {                \
    GTEST_SKIP() << "no AVX512-BF16 or AMX-BF16 here"; \
  }
#define SKIP_WITHOUT_VNNI()                            \
  if (!::gecd::testing::CpuHasVnni()) {                \
    GTEST_SKIP() << "no AVX512-VNNI or AVX-VNNI here"; \
  }

TEST(Int8MatmulTest, IntegerInputsWithFullRangeRowsAreExact) {
  SKIP_WITHOUT_VNNI();
  // Every row reaches 127, so both scales are 1 and the int8 product is the f32 one exactly.
  const int out = 5, in = 9, rows = 3;
  ExpectExactProduct(Precision::kInt8, out, in, rows, 127,
                     [&](std::vector<float>& w, std::vector<float>& x) {
                       for (int o = 0; o < out; ++o) {
                         w[o * in + o % in] = (o % 2 != 0) ? 127.0f : -127.0f;
                       }
                       for (int t = 0; t < rows; ++t) x[t * in + 2 * t] = 127.0f;
                     });
}

// Activations quantize half away from zero and clamp at ±127, in the 16-wide loop and in its
// tail alike: with weights 127·I (scale 1, codes 127) each output is its input's code times 127.
TEST(Int8MatmulTest, ActivationsRoundHalfAwayFromZero) {
  SKIP_WITHOUT_VNNI();
  // Row scale 1 (max |x| = 127), so each code is x rounded; the last three lie in the tail.
  const std::vector<float> x = {127.0f, 2.5f,    -2.5f,   0.5f,   -0.5f, 1.5f,  -1.5f,
                                126.5f, -126.5f, 3.49f,   -3.51f, 0.0f,  -0.0f, 64.5f,
                                -64.5f, 100.0f,  0.4999f, -99.5f, 5.5f};
  const std::vector<int> codes = {127, 3, -3, 1,  -1,  2,   -2, 127,  -127, 3,
                                  -4,  0, 0,  65, -65, 100, 0,  -100, 6};
  const int n = static_cast<int>(x.size());
  std::vector<float> w(n * n, 0.0f);
  for (int o = 0; o < n; ++o) w[o * n + o] = 127.0f;
  auto m = Matmul::Create(Precision::kInt8, "halves", w, {}, n, n, 1);
  ASSERT_TRUE(m.ok()) << m.status();
  MatmulScratch scratch;
  scratch.Reserve(1, n, n);
  std::vector<float> y(n);
  (*m)->Apply(x.data(), 1, y.data(), false, &scratch);
  for (int o = 0; o < n; ++o) EXPECT_EQ(y[o], codes[o] * 127.0f) << "x = " << x[o];
}

TEST(Int8MatmulTest, OddSizesMatchF32WithinTheRoundingBound) {
  SKIP_WITHOUT_VNNI();
  CheckOddSizes(CheckAgainstF32);
}

TEST(Int8MatmulTest, EveryRowClassBoundaryMatchesF32) {
  SKIP_WITHOUT_VNNI();
  CheckRowClassBoundaries(CheckAgainstF32);
}

TEST(Int8MatmulTest, TheErrorIsTheQuantizationsNotNoise) {
  SKIP_WITHOUT_VNNI();
  // Random data uses a real share of the bound (the path quantizes) yet stays inside it.
  const double worst = CheckAgainstF32({64, 256, 16}, false, false, 3);
  EXPECT_GT(worst, 0.01);
  EXPECT_LE(worst, 1.0);
}

// Without VNNI, oneDNN's int8 kernels sum u8 x s8 pairs in saturating 16 bits: wrong outputs,
// so Create refuses. oneDNN fixes its ISA once per process: in a child held to AVX2, started
// afresh (a forked child would inherit the ISA an earlier test of this binary fixed).
TEST(Int8MatmulTest, WithoutVnniItIsRefused) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 here";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!SelectCpuIsa("avx2").ok()) std::exit(2);
        const std::vector<float> w = Random(8 * 16, 1);
        absl::StatusOr<std::unique_ptr<Matmul>> m =
            Matmul::Create(Precision::kInt8, "layers.0.qkv", w, {}, 8, 16, 4);
        const bool refused = m.status().code() == absl::StatusCode::kFailedPrecondition;
        std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
        std::exit(refused ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "layers.0.qkv: an int8 matmul needs VNNI");
}

// bf16 of one value, as every bf16 operand is rounded.
double Bf16(float v) { return Bf16ToFloat(FloatToBf16(v)); }

constexpr double kF32Epsilon = 0x1p-24;  // f32's unit roundoff
constexpr double kBf16Epsilon = 0x1p-8;  // bf16's: 8 significant bits

struct Bf16Worst {
  double of_sum_bound = 0.0;  // against the exact sum of the bf16 operands' products
  double of_f32_bound = 0.0;  // against the f32 operands' product
};

// Runs one bf16 product and checks every output twice:
//  - against the exact (double) sum of the products of the operands rounded by FloatToBf16:
//    a product of two bf16 values is exact in f32, so only the f32 sums differ, by at most
//    (in + 2) f32 roundings of the magnitudes summed (the bias and accumulate add two);
//  - against the f32 operands' product: rounding x and w to bf16 moves each by at most half an
//    ulp, 2^-8 relative, so each product by (2 * 2^-8 + 2^-16) of its magnitude, plus the sums'.
// Returns the largest errors seen relative to those bounds.
Bf16Worst CheckBf16(const Case& c, bool with_bias, bool accumulate, uint32_t seed) {
  const std::vector<float> w = Random(static_cast<size_t>(c.out) * c.in, seed);
  const std::vector<float> x = Random(static_cast<size_t>(c.rows) * c.in, seed + 1, 3.0f);
  const std::vector<float> bias = with_bias ? Random(c.out, seed + 2) : std::vector<float>();
  const std::vector<float> y0 = Random(static_cast<size_t>(c.rows) * c.out, seed + 3);
  absl::StatusOr<std::unique_ptr<Matmul>> m =
      Matmul::Create(Precision::kBf16, "test", w, bias, c.out, c.in, c.rows);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {1.0, 1.0};
  EXPECT_TRUE((*m)->weight_scales().empty());
  MatmulScratch scratch;
  scratch.Reserve(c.rows, c.in, c.out);
  std::vector<float> y = accumulate ? y0 : std::vector<float>(y0.size(), -1.0f);
  (*m)->Apply(x.data(), c.rows, y.data(), accumulate, &scratch);
  Bf16Worst worst;
  for (int t = 0; t < c.rows; ++t) {
    const float* xr = x.data() + static_cast<size_t>(t) * c.in;
    for (int o = 0; o < c.out; ++o) {
      const float* wr = w.data() + static_cast<size_t>(o) * c.in;
      double ref = 0.0, ref_bf16 = 0.0, magnitude = 0.0, magnitude_bf16 = 0.0;
      for (int k = 0; k < c.in; ++k) {
        ref += static_cast<double>(xr[k]) * wr[k];
        magnitude += std::fabs(static_cast<double>(xr[k]) * wr[k]);
        ref_bf16 += Bf16(xr[k]) * Bf16(wr[k]);
        magnitude_bf16 += std::fabs(Bf16(xr[k]) * Bf16(wr[k]));
      }
      double extra = 0.0;
      if (with_bias) extra += bias[o];
      if (accumulate) extra += y0[static_cast<size_t>(t) * c.out + o];
      const double got = y[static_cast<size_t>(t) * c.out + o];
      const double sums = (c.in + 2) * kF32Epsilon * (magnitude_bf16 + std::fabs(extra)) + 1e-30;
      const double err_sum = std::fabs(got - (ref_bf16 + extra));
      EXPECT_LE(err_sum, sums) << "out " << o << " row " << t << " of [" << c.out << ", " << c.in
                               << "] x " << c.rows;
      const double f32_bound = (2 * kBf16Epsilon + kBf16Epsilon * kBf16Epsilon) * magnitude + sums;
      const double err_f32 = std::fabs(got - (ref + extra));
      EXPECT_LE(err_f32, f32_bound) << "out " << o << " row " << t;
      worst.of_sum_bound = std::max(worst.of_sum_bound, err_sum / sums);
      worst.of_f32_bound = std::max(worst.of_f32_bound, err_f32 / f32_bound);
    }
  }
  return worst;
}

TEST(Bf16MatmulTest, BfloatExactInputsGiveTheExactProduct) {
  // Integers up to 256 are bf16 values and their sums here stay below 2^24: every step exact.
  SKIP_WITHOUT_BF16();
  ExpectExactProduct(Precision::kBf16, /*out=*/5, /*in=*/37, /*rows=*/3, 256,
                     [](std::vector<float>&, std::vector<float>&) {});
}

TEST(Bf16MatmulTest, OddSizesMatchWithinTheRoundingBound) {
  SKIP_WITHOUT_BF16();
  CheckOddSizes(CheckBf16);
}

TEST(Bf16MatmulTest, EveryRowClassBoundaryMatchesWithinTheRoundingBound) {
  SKIP_WITHOUT_BF16();
  CheckRowClassBoundaries(CheckBf16);
}

TEST(Bf16MatmulTest, TheErrorIsBf16RoundingNotNoise) {
  // Against the f32 product the outputs move by far more than f32 sums could (the path does
  // round to bf16), yet stay inside the bound; against the rounded operands' sum they move by
  // no more than f32 sums.
  SKIP_WITHOUT_BF16();
  const Bf16Worst worst = CheckBf16({64, 256, 16}, false, false, 3);
  std::printf("bf16 vs f32: worst error %.3g of the bound; vs the bf16 operands' sum %.3g\n",
              worst.of_f32_bound, worst.of_sum_bound);
  EXPECT_GT(worst.of_f32_bound, 0.01);
  EXPECT_LE(worst.of_f32_bound, 1.0);
  EXPECT_LE(worst.of_sum_bound, 1.0);
}

// What both precisions share: one matmul for every row count, bias, non-finite input, refusals.
class MatmulTest : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    if (GetParam() == Precision::kBf16) SKIP_WITHOUT_BF16();
    if (GetParam() == Precision::kInt8) SKIP_WITHOUT_VNNI();
  }
};

INSTANTIATE_TEST_SUITE_P(Precisions, MatmulTest,
                         ::testing::Values(Precision::kInt8, Precision::kBf16),
                         [](const ::testing::TestParamInfo<Precision>& info) {
                           return std::string(PrecisionName(info.param));
                         });

TEST_P(MatmulTest, OneMatmulServesFewerRowsThanItsMaximum) {
  const int out = 24, in = 40;
  const std::vector<float> w = Random(out * in, 1);
  auto m = Matmul::Create(GetParam(), "rows", w, {}, out, in, /*max_rows=*/300);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT((*m)->kernel(), ::testing::Not(::testing::IsEmpty()));
  MatmulScratch scratch;
  scratch.Reserve(300, in, out);
  for (int rows : {300, 1, 37, 300}) {
    const std::vector<float> x = Random(rows * in, rows);
    std::vector<float> y(rows * out), single(out);
    (*m)->Apply(x.data(), rows, y.data(), false, &scratch);
    // Each row alone gives the same bits: a row's result does not depend on its batch. Not so
    // for bf16 on AMX (seen 2026-12-02 on a Xeon with AMX-BF16: last-bit differences between
    // 300 rows and 1): oneDNN runs the large row classes on AMX tiles and the small ones on
    // AVX512-BF16, whose f32 sums go in another order; there the row agrees to f32 rounding.
    const bool bitwise = !(GetParam() == Precision::kBf16 && gecd::testing::CpuHasAmxBf16());
    for (int t = 0; t < rows; t += 17) {
      (*m)->Apply(x.data() + t * in, 1, single.data(), false, &scratch);
      for (int o = 0; o < out; ++o) {
        if (bitwise) {
          EXPECT_EQ(y[t * out + o], single[o]) << rows << " " << t;
        } else {
          EXPECT_NEAR(y[t * out + o], single[o], 1e-5f * std::max(1.0f, std::fabs(single[o])))
              << rows << " " << t;
        }
      }
    }
  }
}

// The MLP's fused row loop (engine/cpu_backend.cc): one layer's output row t, a function of
// it, and the next layer's input row t, in one scratch. Row t's sums and scale must survive
// until OutputRow(t) although SetInputRow has overwritten rows before t: the same bits as two
// Applies with a buffer between them.
TEST_P(MatmulTest, OutputRowIntoTheNextLayersInputRowInOneScratchIsTwoApplies) {
  const int rows = 37, in = 48, mid = 64, out = 24;
  const std::vector<float> w1 = Random(mid * in, 7), w2 = Random(out * mid, 8);
  const std::vector<float> b1 = Random(mid, 9);
  auto first = Matmul::Create(GetParam(), "first", w1, b1, mid, in, rows);
  auto second = Matmul::Create(GetParam(), "second", w2, {}, out, mid, rows);
  ASSERT_TRUE(first.ok() && second.ok());
  MatmulScratch scratch;
  scratch.Reserve(rows, std::max(in, mid), std::max(mid, out));
  // Rows of very different magnitudes, so that every row's scale differs from its neighbours'.
  std::vector<float> x = Random(rows * in, 10);
  for (int t = 0; t < rows; ++t) {
    for (int k = 0; k < in; ++k) x[t * in + k] *= static_cast<float>(1 + t * t);
  }
  auto square = [](std::vector<float>& v) {
    for (float& e : v) e = e * std::fabs(e);
  };
  std::vector<float> hidden(rows * mid), expected = Random(rows * out, 11);
  std::vector<float> fused = expected;
  (*first)->Apply(x.data(), rows, hidden.data(), false, &scratch);
  square(hidden);
  (*second)->Apply(hidden.data(), rows, expected.data(), /*accumulate=*/true, &scratch);

  for (int t = 0; t < rows; ++t) (*first)->SetInputRow(t, x.data() + t * in, &scratch);
  (*first)->Multiply(rows, &scratch);
  std::vector<float> row(mid);
  for (int t = 0; t < rows; ++t) {
    (*first)->OutputRow(t, scratch, row.data(), false);
    square(row);
    (*second)->SetInputRow(t, row.data(), &scratch);
  }
  (*second)->Multiply(rows, &scratch);
  for (int t = 0; t < rows; ++t) (*second)->OutputRow(t, scratch, fused.data() + t * out, true);
  EXPECT_EQ(fused, expected);
}

TEST_P(MatmulTest, AZeroWeightRowGivesItsBias) {
  const int out = 3, in = 16;
  std::vector<float> w = Random(out * in, 2);
  std::fill(w.begin() + in, w.begin() + 2 * in, 0.0f);
  const std::vector<float> bias = {0.5f, -2.0f, 1.0f};
  auto m = Matmul::Create(GetParam(), "zero", w, bias, out, in, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  if (GetParam() == Precision::kInt8) {
    EXPECT_EQ((*m)->weight_scales()[1], 1.0f);
  }
  MatmulScratch scratch;
  scratch.Reserve(4, in, out);
  const std::vector<float> x = Random(4 * in, 3);
  std::vector<float> y(4 * out);
  (*m)->Apply(x.data(), 4, y.data(), false, &scratch);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(y[t * out + 1], -2.0f);
}

TEST_P(MatmulTest, ANonFiniteActivationRowPoisonsOnlyItsOwnOutputs) {
  const int out = 8, in = 32;
  const std::vector<float> w = Random(out * in, 4);
  auto m = Matmul::Create(GetParam(), "nan", w, {}, out, in, 3);
  ASSERT_TRUE(m.ok()) << m.status();
  MatmulScratch scratch;
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

TEST_P(MatmulTest, NonFiniteWeightsAreRefusedNamingTheRow) {
  std::vector<float> w = Random(4 * 8, 6);
  w[2 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
  auto m = Matmul::Create(GetParam(), "model.layers.0.mlp.down_proj", w, {}, 4, 8, 2);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("model.layers.0.mlp.down_proj: weight row 2"));
  w[2 * 8 + 3] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(Matmul::Create(GetParam(), "inf", w, {}, 4, 8, 2).ok());
}

TEST_P(MatmulTest, SizesThatDoNotAddUpAreRefused) {
  const std::vector<float> w = Random(4 * 8, 6);
  for (auto [out, in, rows, bias] : {std::tuple{4, 7, 2, 0}, std::tuple{4, 8, 0, 0},
                                     std::tuple{4, 8, 2, 3}, std::tuple{0, 8, 2, 0}}) {
    const std::vector<float> b(bias, 1.0f);
    auto m = Matmul::Create(GetParam(), "shape", w, b, out, in, rows);
    ASSERT_FALSE(m.ok()) << out << " " << in << " " << rows << " " << bias;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(m.status().message(), HasSubstr("shape: "));
  }
}

}  // namespace
}  // namespace gecd::cpu_matmul
