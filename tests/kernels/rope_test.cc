// Bias + RoPE + paged K/V write (kernels/rope.h) against a double-precision host reference.
#include "kernels/rope.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernel_test_util.h"

namespace gecd::kernels {
namespace {

using testing::Compare;
using testing::Dev;
using testing::FromBf16;
using testing::PagedStep;
using testing::RandomFloats;
using testing::RoundBf16;
using testing::ToBf16;

struct Case {
  int heads, kv_heads, head_dim, block_size;
  bool bias;
  std::vector<std::pair<int, int>> seqs;
};

TEST(RopeTest, RotatesQkAndWritesPagedCache) {
  GECD_REQUIRE_GPU();
  const Case cases[] = {
      {4, 2, 16, 16, false, {{0, 5}}},
      {32, 8, 64, 16, false, {{0, 50}, {49, 1}, {100, 1}, {16, 17}}},
      {14, 2, 64, 16, true, {{0, 33}, {7, 1}, {200, 3}}},
      {6, 3, 10, 4, true, {{0, 9}, {5, 2}}},
      {8, 8, 128, 32, false, {{1000, 2}, {0, 1}}},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    const PagedStep step = PagedStep::Make(c.seqs, c.block_size, seed++);
    const int rows = step.rows(), hd = c.head_dim, half = hd / 2;
    const int qw = c.heads * hd, kvw = c.kv_heads * hd, stride = qw + 2 * kvw;
    const auto qkv = RoundBf16(RandomFloats(static_cast<size_t>(rows) * stride, seed++, -2, 2));
    const auto bias = RandomFloats(stride, seed++, -0.5f, 0.5f);
    std::vector<float> inv_freq(half);
    for (int f = 0; f < half; ++f) {
      inv_freq[f] = 1.0f / std::pow(500000.0f, static_cast<float>(2 * f) / hd);
    }
    const size_t cache_elems = static_cast<size_t>(step.num_blocks) * c.block_size * kvw;
    std::vector<double> q_ref(static_cast<size_t>(rows) * qw);
    std::vector<double> k_ref(cache_elems, NAN), v_ref(cache_elems, NAN);
    for (int t = 0; t < rows; ++t) {
      const int pos = step.positions[t];
      auto val = [&](int i) {
        return static_cast<double>(qkv[static_cast<size_t>(t) * stride + i]) +
               (c.bias ? bias[i] : 0.0);
      };
      for (int h = 0; h < c.heads + c.kv_heads; ++h) {
        for (int f = 0; f < half; ++f) {
          const double angle = static_cast<double>(static_cast<float>(pos) * inv_freq[f]);
          const double x1 = val(h * hd + f), x2 = val(h * hd + f + half);
          const double y1 = x1 * std::cos(angle) - x2 * std::sin(angle);
          const double y2 = x2 * std::cos(angle) + x1 * std::sin(angle);
          if (h < c.heads) {
            q_ref[static_cast<size_t>(t) * qw + h * hd + f] = y1;
            q_ref[static_cast<size_t>(t) * qw + h * hd + f + half] = y2;
          } else {
            const int kh = h - c.heads;
            k_ref[step.CacheIndex(t, pos, kh, f, c.kv_heads, hd)] = y1;
            k_ref[step.CacheIndex(t, pos, kh, f + half, c.kv_heads, hd)] = y2;
          }
        }
      }
      for (int kh = 0; kh < c.kv_heads; ++kh) {
        for (int d = 0; d < hd; ++d) {
          v_ref[step.CacheIndex(t, pos, kh, d, c.kv_heads, hd)] = val(qw + kvw + kh * hd + d);
        }
      }
    }
    Dev<uint16_t> dqkv(ToBf16(qkv)), q_out(q_ref.size()), k(cache_elems), v(cache_elems);
    Dev<float> dbias(bias), dfreq(inv_freq);
    Dev<int32_t> dpos(step.positions), doff(step.table_offsets), dids(step.block_ids);
    q_out.Poison();
    k.Poison();
    v.Poison();
    TokenMeta meta{dpos.get(), doff.get(), dids.get()};
    RopeParams p{c.heads, c.kv_heads, hd, c.block_size};
    GECD_ASSERT_CUDA(LaunchRopeKvWrite(dqkv.get(), c.bias ? dbias.get() : nullptr, dfreq.get(),
                                       meta, rows, p, q_out.get(), k.get(), v.get(), nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::string name = "rope heads=" + std::to_string(c.heads) + "/" +
                             std::to_string(c.kv_heads) + " hd=" + std::to_string(hd) +
                             " rows=" + std::to_string(rows);
    const auto eq = Compare(name + " q", FromBf16(q_out.Download()), q_ref);
    GECD_EXPECT_CLOSE(eq, 5e-3);
    // The cache: written slots match, every other slot is still poisoned.
    for (auto [what, dev, ref] : {std::tuple{"k", &k, &k_ref}, std::tuple{"v", &v, &v_ref}}) {
      const auto got = FromBf16(dev->Download());
      std::vector<float> got_written;
      std::vector<double> ref_written;
      size_t stray = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan((*ref)[i])) {
          if (!std::isnan(got[i])) ++stray;
        } else {
          got_written.push_back(got[i]);
          ref_written.push_back((*ref)[i]);
        }
      }
      EXPECT_EQ(stray, 0u) << name << " " << what << ": slots written that no token owns";
      const auto e = Compare(name + " " + what + " cache", got_written, ref_written);
      GECD_EXPECT_CLOSE(e, 5e-3);
    }
  }
}

}  // namespace
}  // namespace gecd::kernels
