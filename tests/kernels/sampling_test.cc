// Greedy argmax on the device (kernels/sampling.h): lowest id on ties, NaN never wins.
#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernel_test_util.h"

namespace gecd::kernels {
namespace {

using testing::Dev;
using testing::RandomFloats;

TEST(SamplingTest, ArgmaxMatchesHost) {
  GECD_REQUIRE_GPU();
  for (int vocab : {1, 7, 1024, 128256, 151936}) {
    const int rows = 13;
    auto logits = RandomFloats(static_cast<size_t>(rows) * vocab, vocab, -10, 10);
    if (vocab > 100) {
      // Row 1: a tie between two far-apart ids; row 2: ties everywhere; row 3: NaNs.
      float* r1 = logits.data() + vocab;
      r1[vocab - 3] = 50.0f;
      r1[40] = 50.0f;
      std::fill_n(logits.data() + 2 * vocab, vocab, 1.0f);
      float* r3 = logits.data() + 3 * static_cast<size_t>(vocab);
      r3[0] = NAN;
      r3[5] = NAN;
      r3[77] = 60.0f;
    }
    std::vector<int32_t> ref(rows);
    for (int r = 0; r < rows; ++r) {
      const float* row = logits.data() + static_cast<size_t>(r) * vocab;
      int best = -1;
      for (int i = 0; i < vocab; ++i) {
        if (std::isnan(row[i])) continue;
        if (best < 0 || row[i] > row[best]) best = i;
      }
      ref[r] = best;
    }
    Dev<float> dl(logits);
    Dev<int32_t> out(rows);
    out.Poison();
    GECD_ASSERT_CUDA(LaunchArgmax(dl.get(), rows, vocab, out.get(), nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto got = out.Download();
    size_t wrong = 0;
    for (int r = 0; r < rows; ++r) wrong += got[r] != ref[r];
    std::printf("[ argmax vocab=%d rows=%d ] wrong=%zu\n", vocab, rows, wrong);
    EXPECT_EQ(got, ref) << "vocab " << vocab;
  }
}

}  // namespace
}  // namespace gecd::kernels
