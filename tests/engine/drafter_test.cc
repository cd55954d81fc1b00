#include "engine/drafter.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::engine {
namespace {

using Tokens = std::vector<int32_t>;

Tokens Draft(const Tokens& text, const Tokens& output, int expected, int max_drafts,
             int32_t end_token = 99) {
  Tokens drafts = {42};  // cleared by the drafter
  DraftFromText(text, output, expected, end_token, max_drafts, &drafts);
  return drafts;
}

TEST(DrafterTest, AnEmptyOutputDraftsTheTextFromItsStart) {
  EXPECT_EQ(Draft({1, 2, 3, 4}, {}, 0, 3), (Tokens{1, 2, 3}));
  EXPECT_EQ(Draft({1, 2}, {}, 0, 5), (Tokens{1, 2, 99}));
  EXPECT_EQ(Draft({}, {}, 0, 5), (Tokens{99}));  // nothing to copy: the end
  EXPECT_EQ(Draft({1, 2}, {}, 0, 5, /*end_token=*/-1), (Tokens{1, 2}));
  EXPECT_TRUE(Draft({1, 2}, {}, 0, 0).empty());
}

TEST(DrafterTest, ContinuesAfterTheOutputsLastTwoTokensThenTheEnd) {
  const Tokens text = {1, 2, 3, 4, 5};
  EXPECT_EQ(Draft(text, {1, 2}, 2, 2), (Tokens{3, 4}));
  EXPECT_EQ(Draft(text, {1, 2, 3, 4}, 4, 8), (Tokens{5, 99}));
  EXPECT_EQ(Draft(text, {4, 5}, 5, 8), (Tokens{99}));
  // One output token so far: matched alone.
  EXPECT_EQ(Draft(text, {3}, 1, 2), (Tokens{4, 5}));
}

TEST(DrafterTest, ResynchronisesAfterAnEditAndDraftsNothingWithoutAMatch) {
  const Tokens text = {10, 11, 12, 13, 14, 15};
  // "11 12" replaced by "20": the output rejoins at "20 13" only once both match.
  EXPECT_TRUE(Draft(text, {10, 20}, 1, 4).empty());
  EXPECT_EQ(Draft(text, {10, 20, 13}, 1, 4), Tokens{}) << "20 13 is not in the text";
  EXPECT_EQ(Draft(text, {10, 20, 13, 14}, 4, 4), (Tokens{15, 99}));
  // A word dropped: the copy goes on from where the last two tokens are.
  EXPECT_EQ(Draft(text, {10, 12, 13}, 1, 2), (Tokens{14, 15}));
}

TEST(DrafterTest, PicksTheMatchNearestTheExpectedPlace) {
  // "1 2" occurs twice; the copy position picks which one continues.
  const Tokens text = {1, 2, 7, 1, 2, 8};
  EXPECT_EQ(Draft(text, {1, 2}, 2, 1), (Tokens{7}));
  EXPECT_EQ(Draft(text, {1, 2}, 5, 1), (Tokens{8}));
  EXPECT_EQ(Draft(text, {1, 2}, 4, 1), (Tokens{8}));
  EXPECT_EQ(Draft(text, {1, 2}, 3, 1), (Tokens{7}));
}

TEST(DrafterTest, ARepeatedTokenDraftsFromTheExpectedPlace) {
  const Tokens text(2000, 5);
  const Tokens drafts = Draft(text, {5, 5, 5}, 1990, 16);
  EXPECT_EQ(drafts, (Tokens{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 99}));
}

}  // namespace
}  // namespace gecd::engine
