// Paged causal GQA attention (kernels/attention.h) against a double-precision host reference
// over the same bf16 cache: prefill chunks from position 0 and from a cached prefix, decodes,
// contexts longer than one chunk of keys, several head shapes.
#include "kernels/attention.h"

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
  std::vector<std::pair<int, int>> seqs;  // {start_position, num_tokens}
};

TEST(AttentionTest, MatchesReferenceOverPagedCache) {
  GECD_REQUIRE_GPU();
  const Case cases[] = {
      {4, 2, 16, 16, {{0, 7}}},
      {32, 8, 64, 16, {{0, 50}, {50, 1}, {99, 1}, {20, 13}}},  // prefill, decodes, chunk
      {14, 2, 64, 16, {{0, 40}, {300, 1}, {129, 2}}},          // > 128 keys: several chunks
      {6, 3, 10, 4, {{0, 9}, {3, 2}}},                         // odd head_dim (scalar loads)
      {8, 1, 128, 32, {{0, 3}, {1000, 1}}},
      {16, 16, 256, 16, {{0, 5}, {257, 1}}},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    const PagedStep step = PagedStep::Make(c.seqs, c.block_size, seed++);
    const int rows = step.rows(), hd = c.head_dim;
    const int qw = c.heads * hd, kvw = c.kv_heads * hd, group = c.heads / c.kv_heads;
    const size_t cache_elems = static_cast<size_t>(step.num_blocks) * c.block_size * kvw;
    const auto q = RoundBf16(RandomFloats(static_cast<size_t>(rows) * qw, seed++, -2, 2));
    const auto k = RoundBf16(RandomFloats(cache_elems, seed++, -2, 2));
    const auto v = RoundBf16(RandomFloats(cache_elems, seed++, -1, 1));
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<double> ref(static_cast<size_t>(rows) * qw);
    for (int t = 0; t < rows; ++t) {
      const int context = step.positions[t] + 1;
      for (int h = 0; h < c.heads; ++h) {
        const int g = h / group;
        std::vector<double> s(context);
        double mx = -INFINITY;
        for (int j = 0; j < context; ++j) {
          double dot = 0.0;
          for (int d = 0; d < hd; ++d) {
            dot += static_cast<double>(q[static_cast<size_t>(t) * qw + h * hd + d]) *
                   k[step.CacheIndex(t, j, g, d, c.kv_heads, hd)];
          }
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int d = 0; d < hd; ++d) {
          double o = 0.0;
          for (int j = 0; j < context; ++j)
            o += s[j] * v[step.CacheIndex(t, j, g, d, c.kv_heads, hd)];
          ref[static_cast<size_t>(t) * qw + h * hd + d] = o / sum;
        }
      }
    }
    Dev<uint16_t> dq(ToBf16(q)), dk(ToBf16(k)), dv(ToBf16(v)), out(ref.size());
    Dev<int32_t> dpos(step.positions), doff(step.table_offsets), dids(step.block_ids);
    out.Poison();
    TokenMeta meta{dpos.get(), doff.get(), dids.get()};
    AttentionParams p{c.heads, c.kv_heads, hd, c.block_size, static_cast<float>(scale)};
    GECD_ASSERT_CUDA(
        LaunchPagedAttention(dq.get(), dk.get(), dv.get(), meta, rows, p, out.get(), nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::string name = "attention heads=" + std::to_string(c.heads) + "/" +
                             std::to_string(c.kv_heads) + " hd=" + std::to_string(hd) +
                             " rows=" + std::to_string(rows);
    const auto e = Compare(name, FromBf16(out.Download()), ref);
    GECD_EXPECT_CLOSE(e, 5e-3);
  }
}

TEST(AttentionTest, RejectsUnsupportedShapes) {
  GECD_REQUIRE_GPU();
  TokenMeta meta{};
  AttentionParams p{4, 3, 64, 16, 1.0f};  // heads not a multiple of kv_heads
  EXPECT_EQ(LaunchPagedAttention(nullptr, nullptr, nullptr, meta, 1, p, nullptr, nullptr),
            cudaErrorInvalidValue);
  p = {4, 4, 512, 16, 1.0f};  // head_dim too large
  EXPECT_EQ(LaunchPagedAttention(nullptr, nullptr, nullptr, meta, 1, p, nullptr, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace gecd::kernels
