// Embedding gather with previous-step tokens resolved on the device (kernels/embedding.h).
#include "kernels/embedding.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernel_test_util.h"

namespace gecd::kernels {
namespace {

using testing::Compare;
using testing::Dev;
using testing::RandomFloats;
using testing::RoundBf16;
using testing::ToBf16;

TEST(EmbeddingTest, GathersRowsAndResolvesPreviousTokens) {
  GECD_REQUIRE_GPU();
  for (int hidden : {8, 33, 2048}) {
    const int vocab = 1000;
    const auto table = RoundBf16(RandomFloats(static_cast<size_t>(vocab) * hidden, hidden));
    const std::vector<int32_t> tokens = {5, 0, 999, 123, -7, 42};
    const std::vector<int32_t> prev_index = {-1, 2, -1, 0, -1, -1};
    const std::vector<int32_t> prev_tokens = {17, 18, 777};
    std::vector<int32_t> resolved_ref = {5, 777, 999, 17, 0, 42};  // -7: clamped to row 0
    const int rows = static_cast<int>(tokens.size());
    std::vector<float> ref(static_cast<size_t>(rows) * hidden);
    for (int t = 0; t < rows; ++t) {
      std::copy_n(table.begin() + static_cast<size_t>(resolved_ref[t]) * hidden, hidden,
                  ref.begin() + static_cast<size_t>(t) * hidden);
    }
    Dev<uint16_t> dtable(ToBf16(table));
    Dev<int32_t> dtok(tokens), dprev_i(prev_index), dprev(prev_tokens), resolved(rows);
    Dev<float> x(ref.size());
    x.Poison();
    resolved.Poison();
    GECD_ASSERT_CUDA(LaunchEmbedding(dtable.get(), vocab, dtok.get(), dprev_i.get(), dprev.get(),
                                     rows, hidden, x.get(), resolved.get(), nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto e = Compare("embedding hidden=" + std::to_string(hidden), x.Download(), ref);
    GECD_EXPECT_CLOSE(e, 0.0);
    EXPECT_EQ(resolved.Download(), resolved_ref);
  }
}

}  // namespace
}  // namespace gecd::kernels
