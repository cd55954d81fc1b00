// Fused residual add + RMSNorm (+ FP8 quantization), kernels/norm.h, against host references.
#include "kernels/norm.h"

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

TEST(NormTest, AddRmsNormWithAndWithoutRowMap) {
  GECD_REQUIRE_GPU();
  const int shapes[][2] = {{1, 64}, {5, 33}, {40, 896}, {128, 2048}, {3, 8192}};
  const float eps = 1e-5f;
  uint64_t seed = 1;
  for (const auto& sh : shapes) {
    for (bool use_map : {false, true}) {
      const int total = sh[0], hidden = sh[1];
      const auto x = RandomFloats(static_cast<size_t>(total) * hidden, seed++, -2, 2);
      const auto delta = RoundBf16(RandomFloats(x.size(), seed++, -1, 1));
      const auto weight = RandomFloats(hidden, seed++, 0.5f, 1.5f);
      std::vector<int32_t> map;
      if (use_map) {
        for (int r = total - 1; r >= 0; r -= 2) map.push_back(r);  // reversed, every other row
      }
      const int rows = use_map ? static_cast<int>(map.size()) : total;
      // Reference: x' = x + delta on the rows read; h = w * (x' / rms(x')).
      std::vector<float> x_ref = x;
      std::vector<double> h_ref(static_cast<size_t>(rows) * hidden);
      std::vector<float> h_f32(h_ref.size());
      for (int r = 0; r < rows; ++r) {
        const int src = use_map ? map[r] : r;
        float* xr = x_ref.data() + static_cast<size_t>(src) * hidden;
        float sumf = 0.0f;
        for (int i = 0; i < hidden; ++i) {
          xr[i] += delta[static_cast<size_t>(src) * hidden + i];
          sumf += xr[i] * xr[i];
        }
        const float invf = 1.0f / std::sqrt(sumf / hidden + eps);
        double sum = 0.0;
        for (int i = 0; i < hidden; ++i) sum += static_cast<double>(xr[i]) * xr[i];
        const double inv = 1.0 / std::sqrt(sum / hidden + eps);
        for (int i = 0; i < hidden; ++i) {
          h_ref[static_cast<size_t>(r) * hidden + i] = weight[i] * (xr[i] * inv);
          h_f32[static_cast<size_t>(r) * hidden + i] = weight[i] * (xr[i] * invf);
        }
      }
      Dev<float> dx(x), dw(weight);
      Dev<uint16_t> dd(ToBf16(delta)), out(h_ref.size());
      Dev<int32_t> dmap(use_map ? map : std::vector<int32_t>{0});
      Dev<uint8_t> codes(h_ref.size());
      Dev<float> scales(rows);
      out.Poison();
      codes.Poison();
      scales.Poison();
      GECD_ASSERT_CUDA(LaunchAddRmsNorm(dx.get(), dd.get(), use_map ? dmap.get() : nullptr,
                                        dw.get(), rows, hidden, eps, out.get(), codes.get(),
                                        scales.get(), nullptr));
      GECD_ASSERT_CUDA(cudaDeviceSynchronize());
      const std::string name = "add+rmsnorm rows=" + std::to_string(rows) +
                               " hidden=" + std::to_string(hidden) + (use_map ? " mapped" : "");
      const auto e = Compare(name + " bf16", FromBf16(out.Download()), h_ref);
      GECD_EXPECT_CLOSE(e, 5e-3);
      const auto ex = Compare(name + " residual", dx.Download(), x_ref);
      GECD_EXPECT_CLOSE(ex, 1e-6);
      std::vector<uint8_t> ref_codes(h_f32.size());
      std::vector<float> ref_scales(rows);
      QuantizeRowsE4m3Codes(h_f32.data(), rows, hidden, ref_codes.data(), ref_scales.data());
      ExpectFp8Close(name + " fp8", codes.Download(), scales.Download(), ref_codes, ref_scales);
    }
  }
}

TEST(NormTest, NoDeltaLeavesResidualAndAddBf16Adds) {
  GECD_REQUIRE_GPU();
  const int rows = 9, hidden = 100;
  const auto x = RandomFloats(static_cast<size_t>(rows) * hidden, 77);
  const auto delta = RoundBf16(RandomFloats(x.size(), 78));
  const std::vector<float> weight(hidden, 1.0f);
  Dev<float> dx(x), dw(weight);
  Dev<uint16_t> out(x.size()), dd(ToBf16(delta));
  out.Poison();
  GECD_ASSERT_CUDA(LaunchAddRmsNorm(dx.get(), nullptr, nullptr, dw.get(), rows, hidden, 1e-6f,
                                    out.get(), nullptr, nullptr, nullptr));
  GECD_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(dx.Download(), x);
  std::vector<float> ref = x;
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += delta[i];
  GECD_ASSERT_CUDA(LaunchAddBf16(dx.get(), dd.get(), rows, hidden, nullptr));
  GECD_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto e = Compare("add bf16", dx.Download(), ref);
  GECD_EXPECT_CLOSE(e, 1e-7);
}

}  // namespace
}  // namespace gecd::kernels
