#include "engine/copy_bias.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::engine {
namespace {

constexpr int32_t kEos = 2;

TEST(CopyBiasTest, FollowsAPlainCopyToTheEnd) {
  const std::vector<int32_t> text = {10, 11, 12};
  CopyCursor cursor;
  std::vector<int32_t> candidates = {CopyCandidate(text, cursor, kEos)};
  for (int32_t token : text) {
    cursor = AdvanceCopy(text, cursor, token);
    candidates.push_back(CopyCandidate(text, cursor, kEos));
  }
  EXPECT_EQ(candidates, (std::vector<int32_t>{10, 11, 12, kEos}));
}

TEST(CopyBiasTest, RealignsAfterReplacedDroppedAndAddedWords) {
  const std::vector<int32_t> text = {10, 11, 12, 13, 14};
  // 11 replaced by 50: unaligned, then 12 realigns.
  CopyCursor c = AdvanceCopy(text, {.position = 1, .aligned = true}, 50);
  EXPECT_EQ(CopyCandidate(text, c, kEos), -1);
  EXPECT_EQ(c.position, 1);
  c = AdvanceCopy(text, c, 12);
  EXPECT_TRUE(c.aligned);
  EXPECT_EQ(CopyCandidate(text, c, kEos), 13);
  // 12 dropped: 13 follows 11.
  c = AdvanceCopy(text, {.position = 2, .aligned = true}, 13);
  EXPECT_EQ(CopyCandidate(text, c, kEos), 14);
  // 14 after the end realigns on the last token: next is EOS.
  c = AdvanceCopy(text, {.position = 5, .aligned = true}, 14);
  EXPECT_EQ(CopyCandidate(text, c, kEos), kEos);
}

TEST(CopyBiasTest, RepeatedTokensAlignNearestTheCursorLowerOnATie) {
  const std::vector<int32_t> text = {7, 1, 7, 2, 7, 3};
  EXPECT_EQ(AdvanceCopy(text, {.position = 2, .aligned = true}, 7).position, 3);
  EXPECT_EQ(AdvanceCopy(text, {.position = 4, .aligned = true}, 7).position, 5);
  // Positions 2 and 4 are both one away from 3: the lower wins.
  EXPECT_EQ(AdvanceCopy(text, {.position = 3, .aligned = true}, 7).position, 3);
  EXPECT_EQ(AdvanceCopy(text, {.position = 0, .aligned = false}, 7).position, 1);
}

TEST(CopyBiasTest, NoCandidateWithoutEndTokenOrText) {
  EXPECT_EQ(CopyCandidate({}, CopyCursor{}, kEos), kEos);
  EXPECT_EQ(CopyCandidate({}, CopyCursor{}, -1), -1);
  const std::vector<int32_t> text = {5};
  EXPECT_EQ(CopyCandidate(text, {.position = 2, .aligned = true}, kEos), -1);
}

TEST(CopyBiasTest, BiasedArgmaxPrefersTheCandidateWithinTheBias) {
  const std::vector<float> logits = {0.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(BiasedArgmax(logits, -1, 5.0f), 1);   // no candidate: plain argmax, lowest id
  EXPECT_EQ(BiasedArgmax(logits, 2, 0.5f), 1);    // 2.5 < 3
  EXPECT_EQ(BiasedArgmax(logits, 2, 1.5f), 2);    // 3.5 > 3
  EXPECT_EQ(BiasedArgmax(logits, 0, 3.0f), 0);    // tie with 1 and 3: lowest id
  EXPECT_EQ(BiasedArgmax(logits, 3, 0.0f), 1);    // tie: lowest id still
  EXPECT_EQ(BiasedArgmax(logits, 4, 100.0f), 1);  // outside the vocabulary: ignored
}

// The vectorized argmax answers what std::max_element answers (the first of the largest;
// a NaN is never larger, a NaN first element stays the answer) at every length around its
// 16-value chunks, with ties, infinities and NaNs anywhere.
TEST(CopyBiasTest, ArgmaxIsMaxElementsAnswer) {
  std::mt19937 random(25);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<int> lengths;
  for (int n = 1; n <= 70; ++n) lengths.push_back(n);
  lengths.push_back(8000);
  for (int n : lengths) {
    for (int trial = 0; trial < 40; ++trial) {
      std::uniform_int_distribution<int> value(-3, 3);  // few values: many ties
      std::vector<float> v(n);
      for (float& x : v) x = static_cast<float>(value(random));
      std::uniform_int_distribution<int> at(0, n - 1);
      switch (trial % 5) {
        case 1:
          v[at(random)] = nan;
          break;
        case 2:
          v[0] = nan;
          break;
        case 3:
          std::fill(v.begin(), v.end(), -inf);
          v[at(random)] = nan;
          break;
        case 4:
          v[at(random)] = inf;
          v[at(random)] = nan;
          break;
        default:
          break;
      }
      const auto expected = static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
      ASSERT_EQ(BiasedArgmax(v, -1, 0.0f), expected) << "length " << n << ", trial " << trial;
    }
  }
}

}  // namespace
}  // namespace gecd::engine
