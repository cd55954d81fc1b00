// SwiGLU, row / tensor quantization and the FP8 fallback epilogue (kernels/activation.h)
// against host references using common/numerics.h.
#include "kernels/activation.h"

#include <cmath>
#include <vector>

#include "common/numerics.h"
#include "gtest/gtest.h"
#include "kernel_test_util.h"

namespace gecd::kernels {
namespace {

using testing::Compare;
using testing::Dev;
using testing::ExpectFp8Close;
using testing::FromBf16;
using testing::RandomFloats;
using testing::RoundBf16;
using testing::ToBf16;

TEST(ActivationTest, SwiGluBf16AndFp8) {
  GECD_REQUIRE_GPU();
  const int shapes[][2] = {{1, 64}, {3, 7}, {17, 1000}, {64, 4864}, {5, 8192}};
  uint64_t seed = 1;
  for (const auto& sh : shapes) {
    const int rows = sh[0], inter = sh[1];
    const auto gu = RoundBf16(RandomFloats(static_cast<size_t>(rows) * 2 * inter, seed++, -4, 4));
    std::vector<float> ref(static_cast<size_t>(rows) * inter);
    for (int t = 0; t < rows; ++t) {
      for (int i = 0; i < inter; ++i) {
        const float g = gu[static_cast<size_t>(t) * 2 * inter + i];
        const float u = gu[static_cast<size_t>(t) * 2 * inter + inter + i];
        ref[static_cast<size_t>(t) * inter + i] = g / (1.0f + std::exp(-g)) * u;
      }
    }
    Dev<uint16_t> dgu(ToBf16(gu)), out(ref.size());
    Dev<uint8_t> codes(ref.size());
    Dev<float> scales(rows);
    out.Poison();
    codes.Poison();
    scales.Poison();
    GECD_ASSERT_CUDA(
        LaunchSwiGlu(dgu.get(), rows, inter, out.get(), codes.get(), scales.get(), nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::string name =
        "swiglu rows=" + std::to_string(rows) + " inter=" + std::to_string(inter);
    const auto e = Compare(name + " bf16", FromBf16(out.Download()), ref);
    GECD_EXPECT_CLOSE(e, 5e-3);
    std::vector<uint8_t> ref_codes(ref.size());
    std::vector<float> ref_scales(rows);
    QuantizeRowsE4m3Codes(ref.data(), rows, inter, ref_codes.data(), ref_scales.data());
    ExpectFp8Close(name + " fp8", codes.Download(), scales.Download(), ref_codes, ref_scales);

    // bf16 only: the FP8 outputs stay untouched.
    codes.Poison();
    GECD_ASSERT_CUDA(LaunchSwiGlu(dgu.get(), rows, inter, out.get(), nullptr, nullptr, nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    for (uint8_t c : codes.Download()) ASSERT_EQ(c, 0xFF);
  }
}

TEST(ActivationTest, QuantizeRowsAndTensor) {
  GECD_REQUIRE_GPU();
  const int shapes[][2] = {{1, 16}, {7, 33}, {64, 2048}, {3, 8192}};
  uint64_t seed = 10;
  for (const auto& sh : shapes) {
    const int rows = sh[0], cols = sh[1];
    auto x = RoundBf16(RandomFloats(static_cast<size_t>(rows) * cols, seed++, -3, 3));
    // An all-zero row takes kMinFp8Scale.
    if (rows > 2) std::fill(x.begin() + cols, x.begin() + 2 * cols, 0.0f);
    Dev<uint16_t> dx(ToBf16(x));
    Dev<uint8_t> codes(x.size());
    Dev<float> scales(rows), amax(1);
    codes.Poison();
    scales.Poison();
    GECD_ASSERT_CUDA(LaunchQuantizeRows(dx.get(), rows, cols, codes.get(), scales.get(), nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<uint8_t> ref_codes(x.size());
    std::vector<float> ref_scales(rows);
    QuantizeRowsE4m3Codes(x.data(), rows, cols, ref_codes.data(), ref_scales.data());
    const std::string name = "rows=" + std::to_string(rows) + " cols=" + std::to_string(cols);
    // Same f32 inputs and the same division: the codes must match exactly.
    const auto got = codes.Download();
    EXPECT_EQ(got, ref_codes) << name;
    ExpectFp8Close("quantize rows " + name, got, scales.Download(), ref_codes, ref_scales);

    Dev<float> tscale(1);
    codes.Poison();
    tscale.Poison();
    GECD_ASSERT_CUDA(
        LaunchQuantizeTensor(dx.get(), rows, cols, codes.get(), tscale.get(), amax.get(), nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<float> ref_tscale(1);
    QuantizeRowsE4m3Codes(x.data(), 1, x.size(), ref_codes.data(), ref_tscale.data());
    ExpectFp8Close("quantize tensor " + name, codes.Download(), tscale.Download(), ref_codes,
                   ref_tscale);
  }
}

TEST(ActivationTest, ScaleRowsCols) {
  GECD_REQUIRE_GPU();
  const int rows = 37, out = 129;
  const auto acc = RandomFloats(static_cast<size_t>(rows) * out, 5, -100, 100);
  const auto sx = RandomFloats(rows, 6, 0.001f, 0.01f);
  const auto sw = RandomFloats(out, 7, 0.0001f, 0.001f);
  std::vector<double> ref(acc.size());
  for (int t = 0; t < rows; ++t) {
    for (int o = 0; o < out; ++o) {
      ref[static_cast<size_t>(t) * out + o] =
          static_cast<double>(acc[static_cast<size_t>(t) * out + o]) * sx[t] * sw[o];
    }
  }
  Dev<float> dacc(acc), dsx(sx), dsw(sw);
  Dev<uint16_t> y(acc.size());
  y.Poison();
  GECD_ASSERT_CUDA(
      LaunchScaleRowsCols(dacc.get(), dsx.get(), dsw.get(), rows, out, y.get(), nullptr));
  GECD_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto e = Compare("scale rows cols", FromBf16(y.Download()), ref);
  GECD_EXPECT_CLOSE(e, 5e-3);
}

}  // namespace
}  // namespace gecd::kernels
