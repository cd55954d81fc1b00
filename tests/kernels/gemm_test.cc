// cuBLASLt GEMMs (kernels/gemm.h) against double-precision host references on the same
// (bf16- or e4m3-rounded) operands.
#include "kernels/gemm.h"

#include <cstdio>
#include <tuple>
#include <vector>

#include "common/numerics.h"
#include "gtest/gtest.h"
#include "kernel_test_util.h"

namespace gecd::kernels {
namespace {

using testing::Compare;
using testing::Dev;
using testing::FromBf16;
using testing::RandomFloats;
using testing::RoundBf16;
using testing::ToBf16;

struct Shape {
  int rows, out, in;
};

std::string Name(const char* kind, const Shape& s) {
  return std::string(kind) + " rows=" + std::to_string(s.rows) + " out=" + std::to_string(s.out) +
         " in=" + std::to_string(s.in);
}

// y[t, o] = sum_i x[t, i] w[o, i] in double.
std::vector<double> RefGemm(const std::vector<float>& x, const std::vector<float>& w, int rows,
                            int out, int in) {
  std::vector<double> y(static_cast<size_t>(rows) * out);
  for (int t = 0; t < rows; ++t) {
    for (int o = 0; o < out; ++o) {
      double acc = 0.0;
      for (int i = 0; i < in; ++i) {
        acc += static_cast<double>(x[static_cast<size_t>(t) * in + i]) *
               w[static_cast<size_t>(o) * in + i];
      }
      y[static_cast<size_t>(t) * out + o] = acc;
    }
  }
  return y;
}

TEST(GemmTest, Bf16ToBf16AndF32) {
  GECD_REQUIRE_GPU();
  GemmRunner gemm;
  GECD_ASSERT_OK(gemm.Init());
  const Shape shapes[] = {
      {1, 64, 64}, {7, 130, 96}, {33, 257, 200}, {128, 1024, 512}, {3, 1000, 64}};
  uint64_t seed = 1;
  for (const Shape& s : shapes) {
    const auto x = RoundBf16(RandomFloats(static_cast<size_t>(s.rows) * s.in, seed++));
    const auto w = RoundBf16(RandomFloats(static_cast<size_t>(s.out) * s.in, seed++));
    const auto ref = RefGemm(x, w, s.rows, s.out, s.in);
    Dev<uint16_t> dx(ToBf16(x)), dw(ToBf16(w));
    Dev<uint16_t> y16(ref.size());
    Dev<float> y32(ref.size());
    y16.Poison();
    y32.Poison();
    GECD_ASSERT_OK(
        gemm.Bf16(dx.get(), dw.get(), s.rows, s.out, s.in, y16.get(), GemmOut::kBf16, nullptr));
    GECD_ASSERT_OK(
        gemm.Bf16(dx.get(), dw.get(), s.rows, s.out, s.in, y32.get(), GemmOut::kF32, nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto e16 = Compare(Name("bf16->bf16", s), FromBf16(y16.Download()), ref);
    GECD_EXPECT_CLOSE(e16, 5e-3);  // one bf16 rounding of the output: ~2^-9 relative
    const auto e32 = Compare(Name("bf16->f32", s), y32.Download(), ref);
    GECD_EXPECT_CLOSE(e32, 1e-5);  // f32 accumulation of exact products
  }
}

// Quantizes like common/numerics.h and returns codes, scales and the decoded values.
struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<float> values;  // decoded e4m3 (unscaled)
};
Quantized QuantizeRows(const std::vector<float>& x, int rows, int cols) {
  Quantized q;
  q.codes.resize(x.size());
  q.scales.resize(rows);
  QuantizeRowsE4m3Codes(x.data(), rows, cols, q.codes.data(), q.scales.data());
  q.values.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) q.values[i] = E4m3ToFloat(q.codes[i]);
  return q;
}

void RunFp8RowCol(bool force_fallback) {
  GemmRunner gemm;
  GECD_ASSERT_OK(gemm.Init());
  std::printf("%s\n", gemm.Describe().c_str());
  if (!force_fallback && !gemm.outer_vec_available()) {
    GTEST_SKIP() << "cuBLASLt has no OUTER_VEC_32F FP8 algorithm here (" << gemm.Describe()
                 << "); the fallback test covers per-channel FP8";
  }
  if (force_fallback) gemm.set_outer_vec_available(false);
  const Shape shapes[] = {{1, 64, 64}, {5, 136, 96}, {37, 264, 208}, {256, 2048, 1024}, {3, 8, 16}};
  uint64_t seed = 100;
  for (const Shape& s : shapes) {
    // Rows of different magnitudes so wrong scale placement (row vs column) shows.
    auto x = RandomFloats(static_cast<size_t>(s.rows) * s.in, seed++);
    auto w = RandomFloats(static_cast<size_t>(s.out) * s.in, seed++);
    for (int t = 0; t < s.rows; ++t) {
      for (int i = 0; i < s.in; ++i) x[static_cast<size_t>(t) * s.in + i] *= 1.0f + t % 7;
    }
    for (int o = 0; o < s.out; ++o) {
      for (int i = 0; i < s.in; ++i) w[static_cast<size_t>(o) * s.in + i] *= 0.01f * (1 + o % 5);
    }
    const Quantized qx = QuantizeRows(x, s.rows, s.in);
    const Quantized qw = QuantizeRows(w, s.out, s.in);
    auto ref = RefGemm(qx.values, qw.values, s.rows, s.out, s.in);
    for (int t = 0; t < s.rows; ++t) {
      for (int o = 0; o < s.out; ++o) {
        ref[static_cast<size_t>(t) * s.out + o] *= static_cast<double>(qx.scales[t]) * qw.scales[o];
      }
    }
    Dev<uint8_t> dx(qx.codes), dw(qw.codes);
    Dev<float> dsx(qx.scales), dsw(qw.scales);
    Dev<float> acc(ref.size());
    Dev<uint16_t> y(ref.size());
    y.Poison();
    GECD_ASSERT_OK(gemm.Fp8RowCol(dx.get(), dsx.get(), dw.get(), dsw.get(), s.rows, s.out, s.in,
                                  y.get(), acc.get(), nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto e =
        Compare(Name(force_fallback ? "fp8 rowcol (fallback)" : "fp8 rowcol (outer vec)", s),
                FromBf16(y.Download()), ref);
    GECD_EXPECT_CLOSE(e, 5e-3);
  }
  std::printf("after run: %s\n", gemm.Describe().c_str());
  if (!force_fallback) {
    EXPECT_EQ(gemm.outer_vec_refused_shapes(), 0)
        << "cuBLASLt refused OUTER_VEC_32F for some shapes (they ran the fallback, so the "
           "results above are still checked): "
        << gemm.Describe();
  }
}

TEST(GemmTest, Fp8PerChannelOuterVec) {
  GECD_REQUIRE_GPU();
  RunFp8RowCol(/*force_fallback=*/false);
}

TEST(GemmTest, Fp8PerChannelFallback) {
  GECD_REQUIRE_GPU();
  RunFp8RowCol(/*force_fallback=*/true);
}

TEST(GemmTest, Fp8PerTensor) {
  GECD_REQUIRE_GPU();
  GemmRunner gemm;
  GECD_ASSERT_OK(gemm.Init());
  const Shape shapes[] = {{1, 64, 64}, {9, 136, 96}, {64, 512, 256}};
  uint64_t seed = 200;
  for (const Shape& s : shapes) {
    const auto x = RandomFloats(static_cast<size_t>(s.rows) * s.in, seed++);
    const auto w = RandomFloats(static_cast<size_t>(s.out) * s.in, seed++);
    const Quantized qx = QuantizeRows(x, 1, s.rows * s.in);  // one scale: the whole tensor
    const Quantized qw = QuantizeRows(w, 1, s.out * s.in);
    auto ref = RefGemm(qx.values, qw.values, s.rows, s.out, s.in);
    for (double& v : ref) v *= static_cast<double>(qx.scales[0]) * qw.scales[0];
    Dev<uint8_t> dx(qx.codes), dw(qw.codes);
    Dev<float> dsx(qx.scales), dsw(qw.scales);
    Dev<uint16_t> y(ref.size());
    y.Poison();
    GECD_ASSERT_OK(gemm.Fp8PerTensor(dx.get(), dsx.get(), dw.get(), dsw.get(), s.rows, s.out, s.in,
                                     y.get(), nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto e = Compare(Name("fp8 per-tensor", s), FromBf16(y.Download()), ref);
    GECD_EXPECT_CLOSE(e, 5e-3);
  }
}

TEST(GemmTest, RejectsFp8ShapesItCannotRun) {
  GECD_REQUIRE_GPU();
  GemmRunner gemm;
  GECD_ASSERT_OK(gemm.Init());
  Dev<uint8_t> x(64), w(64);
  Dev<float> s(8);
  Dev<uint16_t> y(64);
  Dev<float> acc(64);
  const absl::Status st =
      gemm.Fp8RowCol(x.get(), s.get(), w.get(), s.get(), 1, 8, 8, y.get(), acc.get(), nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
}

}  // namespace
}  // namespace gecd::kernels

namespace gecd::kernels {
namespace {

// Not a correctness check: times bf16 and FP8 GEMMs at Llama-3.2-1B shapes so one GPU run shows
// whether FP8 pays off (printed TFLOP/s; fails only on errors).
TEST(GemmTest, ThroughputReport) {
  GECD_REQUIRE_GPU();
  GemmRunner gemm;
  GECD_ASSERT_OK(gemm.Init());
  std::printf("%s\n", gemm.Describe().c_str());
  const Shape shapes[] = {{512, 16384, 2048},
                          {512, 2048, 8192},
                          {8192, 16384, 2048},
                          {8192, 3072, 2048},
                          {64, 128256, 2048}};
  cudaStream_t stream = nullptr;
  GECD_ASSERT_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t start = nullptr, stop = nullptr;
  GECD_ASSERT_CUDA(cudaEventCreate(&start));
  GECD_ASSERT_CUDA(cudaEventCreate(&stop));
  for (const Shape& s : shapes) {
    const size_t xn = static_cast<size_t>(s.rows) * s.in, wn = static_cast<size_t>(s.out) * s.in;
    Dev<uint16_t> x16(xn), w16(wn), y(static_cast<size_t>(s.rows) * s.out);
    Dev<uint8_t> x8(xn), w8(wn);
    Dev<float> sx(s.rows), sw(s.out), acc(static_cast<size_t>(s.rows) * s.out);
    GECD_ASSERT_CUDA(cudaMemset(x16.get(), 0x3c, xn * 2));  // small finite values
    GECD_ASSERT_CUDA(cudaMemset(w16.get(), 0x3c, wn * 2));
    GECD_ASSERT_CUDA(cudaMemset(x8.get(), 0x30, xn));
    GECD_ASSERT_CUDA(cudaMemset(w8.get(), 0x30, wn));
    GECD_ASSERT_CUDA(cudaMemset(sx.get(), 0, s.rows * 4));
    GECD_ASSERT_CUDA(cudaMemset(sw.get(), 0, s.out * 4));
    auto time = [&](const char* what, auto&& run) {
      for (int i = 0; i < 3; ++i) ASSERT_TRUE(run().ok());  // plans, warm-up
      constexpr int kIters = 20;
      GECD_ASSERT_CUDA(cudaEventRecord(start, stream));
      for (int i = 0; i < kIters; ++i) ASSERT_TRUE(run().ok());
      GECD_ASSERT_CUDA(cudaEventRecord(stop, stream));
      GECD_ASSERT_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      GECD_ASSERT_CUDA(cudaEventElapsedTime(&ms, start, stop));
      const double tflops = 2.0 * s.rows * s.out * s.in * kIters / (ms * 1e-3) / 1e12;
      std::printf("[ gemm %s rows=%d out=%d in=%d ] %.3f ms, %.0f TFLOP/s\n", what, s.rows, s.out,
                  s.in, ms / kIters, tflops);
    };
    time("bf16", [&] {
      return gemm.Bf16(x16.get(), w16.get(), s.rows, s.out, s.in, y.get(), GemmOut::kBf16, stream);
    });
    if (s.out == 128256) continue;  // the LM head stays bf16
    gemm.set_outer_vec_available(true);
    if (gemm.Init().ok() && gemm.outer_vec_available()) {
      time("fp8 outer-vec", [&] {
        return gemm.Fp8RowCol(x8.get(), sx.get(), w8.get(), sw.get(), s.rows, s.out, s.in, y.get(),
                              acc.get(), stream);
      });
    }
    gemm.set_outer_vec_available(false);
    time("fp8 fallback", [&] {
      return gemm.Fp8RowCol(x8.get(), sx.get(), w8.get(), sw.get(), s.rows, s.out, s.in, y.get(),
                            acc.get(), stream);
    });
    time("fp8 per-tensor", [&] {
      return gemm.Fp8PerTensor(x8.get(), sx.get(), w8.get(), sw.get(), s.rows, s.out, s.in, y.get(),
                               stream);
    });
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace gecd::kernels
