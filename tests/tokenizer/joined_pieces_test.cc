#include "tokenizer/joined_pieces.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::model {
namespace {

using ::testing::HasSubstr;

TEST(JoinedPiecesTest, LaysPiecesEndToEndAndDropsEmptyOnes) {
  const TextPiece pieces[] = {{"<s>", true}, {"", false}, {"abc", false}, {"<sep>", true}};
  auto joined = JoinedPieces::Join(pieces);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->text(), "<s>abc<sep>");
  ASSERT_EQ(joined->pieces().size(), 3u);
  EXPECT_EQ(joined->pieces()[1].begin, 3u);
  EXPECT_EQ(joined->pieces()[1].end, 6u);
  EXPECT_FALSE(joined->pieces()[1].special_tokens_allowed);
}

TEST(JoinedPiecesTest, AllowsTokensOnlyInsideOneAllowingPiece) {
  const TextPiece pieces[] = {{"<s>", true}, {"abc", false}, {"<se", true}, {"p>", true}};
  auto joined = JoinedPieces::Join(pieces);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_TRUE(joined->AllowsTokenAt(0, 3));
  EXPECT_TRUE(joined->AllowsTokenAt(1, 2));
  EXPECT_FALSE(joined->AllowsTokenAt(3, 6));   // the user's text
  EXPECT_FALSE(joined->AllowsTokenAt(2, 4));   // across the template/text boundary
  EXPECT_FALSE(joined->AllowsTokenAt(6, 11));  // across two template pieces
  EXPECT_TRUE(joined->AllowsTokenAt(6, 9));
  EXPECT_FALSE(joined->AllowsTokenAt(11, 12));  // past the end
}

TEST(JoinedPiecesTest, InvalidUtf8NamesThePiece) {
  const TextPiece one[] = {{"a\xFF", true}};
  auto single = JoinedPieces::Join(one);
  EXPECT_EQ(single.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(single.status().message()), HasSubstr("offset 1"));
  const TextPiece three[] = {{"ok", true}, {"fine", false}, {"\xC3", true}};
  auto several = JoinedPieces::Join(three);
  EXPECT_EQ(several.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(several.status().message()), HasSubstr("text piece 2 of 3"));
}

}  // namespace
}  // namespace gecd::model
