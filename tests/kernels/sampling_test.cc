// Greedy sampling on the device (kernels/sampling.h): argmax with the lowest id on ties, NaN
// never winning, and the copy bias against its CPU reference (engine/copy_bias.h).
#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "engine/copy_bias.h"

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
    GECD_ASSERT_CUDA(LaunchArgmax(dl.get(), rows, vocab, nullptr, nullptr, out.get(), nullptr));
    GECD_ASSERT_CUDA(cudaDeviceSynchronize());
    const auto got = out.Download();
    size_t wrong = 0;
    for (int r = 0; r < rows; ++r) wrong += got[r] != ref[r];
    std::printf("[ argmax vocab=%d rows=%d ] wrong=%zu\n", vocab, rows, wrong);
    EXPECT_EQ(got, ref) << "vocab " << vocab;
  }
}

// Random texts over a small alphabet (so a token occurs several times and the nearest
// occurrence, lower on a tie, matters), texts longer than a warp, cursors anywhere including the
// end, unaligned cursors, rows without a bias, and logits where the boosted candidate ties the
// maximum exactly on either side of it.
TEST(SamplingTest, CopyBiasMatchesHost) {
  GECD_REQUIRE_GPU();
  constexpr int kVocab = 300;
  constexpr int kRows = 203;  // not a multiple of the kernel's rows per block
  constexpr int32_t kEnd = 1;
  std::mt19937 rng(5);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<int32_t> texts, sample_rows(kRows), resolved(2 * kRows);
  std::vector<CopyRow> copy(kRows);
  std::vector<float> logits(static_cast<size_t>(kRows) * kVocab);
  for (float& v : logits) v = static_cast<float>(uniform(-400, 400)) / 64.0f;  // exact sums
  const int lengths[] = {0, 1, 2, 7, 31, 32, 33, 50, 300};
  for (int q = 0; q < kRows; ++q) {
    const int length = lengths[q % std::size(lengths)];
    const int alphabet = q % 3 == 0 ? 4 : 40;
    CopyRow& row = copy[q];
    row.bias = q % 7 == 0 ? 0.0f : static_cast<float>(uniform(1, 16)) / 4.0f;
    row.text_offset = static_cast<int32_t>(texts.size());
    row.text_length = length;
    row.end_token = q % 5 == 0 ? -1 : kEnd;
    row.position = uniform(0, length);
    row.aligned = q % 11 != 0;
    row.advance = q % 4 != 0;
    for (int j = 0; j < length; ++j) texts.push_back(uniform(2, 2 + alphabet - 1));
    // Sampled rows index a larger token array, as in a step with prefill rows.
    sample_rows[q] = 2 * q + 1;
    resolved[2 * q] = 0;
    resolved[2 * q + 1] = q % 9 == 0 ? kVocab - 1 : uniform(2, 2 + alphabet);  // may be absent
  }
  std::vector<int32_t> want(kRows);
  for (int q = 0; q < kRows; ++q) {
    const CopyRow& row = copy[q];
    const std::span<const int32_t> text(texts.data() + row.text_offset, row.text_length);
    engine::CopyCursor cursor{.position = row.position, .aligned = row.aligned != 0};
    if (row.advance) cursor = engine::AdvanceCopy(text, cursor, resolved[sample_rows[q]]);
    const int32_t candidate =
        row.bias == 0.0f ? -1 : engine::CopyCandidate(text, cursor, row.end_token);
    std::span<float> l(logits.data() + static_cast<size_t>(q) * kVocab, kVocab);
    if (candidate >= 0 && q % 2 == 0) {
      // An exact tie between the boosted candidate and the maximum: the lower id wins.
      const auto best = std::max_element(l.begin(), l.end()) - l.begin();
      l[candidate] = l[best] - row.bias;
    }
    want[q] = engine::BiasedArgmax(l, candidate, row.bias);
  }
  Dev<int32_t> dtexts(texts.empty() ? std::vector<int32_t>{0} : texts);
  Dev<int32_t> dsample(sample_rows), dresolved(resolved);
  std::vector<int32_t> copy_ints(copy.size() * 8);
  std::memcpy(copy_ints.data(), copy.data(), copy.size() * sizeof(CopyRow));
  Dev<int32_t> dcopy(copy_ints);
  Dev<float> dlogits(logits), dbias(kRows);
  Dev<int32_t> dcandidate(kRows), out(kRows);
  dcandidate.Poison();
  out.Poison();
  GECD_ASSERT_CUDA(LaunchCopyCandidates(reinterpret_cast<const CopyRow*>(dcopy.get()), dtexts.get(),
                                        dsample.get(), dresolved.get(), kRows, dcandidate.get(),
                                        dbias.get(), nullptr));
  GECD_ASSERT_CUDA(LaunchArgmax(dlogits.get(), kRows, kVocab, dcandidate.get(), dbias.get(),
                                out.get(), nullptr));
  GECD_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto got = out.Download();
  int changed = 0;  // rows where the bias changed the plain argmax
  for (int q = 0; q < kRows; ++q) {
    const std::span<const float> l(logits.data() + static_cast<size_t>(q) * kVocab, kVocab);
    changed += want[q] != std::max_element(l.begin(), l.end()) - l.begin();
    EXPECT_EQ(got[q], want[q]) << "row " << q << " text length " << copy[q].text_length;
  }
  std::printf("[ copy bias rows=%d ] the bias changed %d argmaxes\n", kRows, changed);
  EXPECT_GT(changed, kRows / 5);  // the test exercises the bias, not just the argmax
}

}  // namespace
}  // namespace gecd::kernels
