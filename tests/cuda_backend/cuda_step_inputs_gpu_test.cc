// The cuda backend's step-input layout (cuda_backend/cuda_step_inputs.h): host arithmetic only, so
// it runs without a device (it is a GPU test because it needs the CUDA headers).
#include "cuda_backend/cuda_step_inputs.h"

#include <cstddef>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::engine {
namespace {

TEST(StepInputLayoutTest, ArraysAreAlignedAndDisjoint) {
  for (const auto& [rows, samples] :
       std::vector<std::pair<int, int>>{{1, 1}, {1, 0}, {64, 64}, {65, 3}, {200, 0}, {8192, 512}}) {
    const StepInputLayout at(rows, samples);
    SCOPED_TRACE(::testing::Message() << rows << " rows, " << samples << " sampled");
    // Each array starts on a 64-int boundary where the previous one ends or later.
    const std::vector<std::pair<size_t, size_t>> arrays = {
        {at.tokens, rows},         {at.prev_index, rows},
        {at.positions, rows},      {at.table_offsets, rows},
        {at.sample_rows, samples}, {at.copy_rows, StepInputLayout::kCopyRowInts * samples},
        {at.block_ids, 0}};
    for (size_t i = 0; i < arrays.size(); ++i) {
      EXPECT_EQ(arrays[i].first % 64, 0u) << "array " << i;
      if (i > 0) {
        EXPECT_GE(arrays[i].first, arrays[i - 1].first + arrays[i - 1].second);
      }
    }
    EXPECT_EQ(at.texts(5), at.block_ids + 5);
  }
  EXPECT_EQ(StepInputLayout::kCopyRowInts, 8u);
}

TEST(StepInputLayoutTest, FixedIntsHoldTheLargestStep) {
  const int max_rows = 300, max_samples = 70, max_block_ids = 1000;
  const size_t fixed = StepInputLayout::FixedInts(max_rows, max_samples, max_block_ids);
  for (int rows : {1, 64, 299, 300}) {
    for (int samples : {0, 1, 70}) {
      EXPECT_LE(StepInputLayout(rows, samples).texts(max_block_ids), fixed)
          << rows << " rows, " << samples << " sampled";
    }
  }
}

}  // namespace
}  // namespace gecd::engine
