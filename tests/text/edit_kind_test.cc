#include "text/edit_kind.h"

#include "gtest/gtest.h"

namespace gecd::text {
namespace {

TEST(EditKindTest, EachKindFromTheEditAlone) {
  EXPECT_EQ(ClassifyEdit("  ", " "), EditKind::kWhitespace);
  EXPECT_EQ(ClassifyEdit("home,", "home ,"), EditKind::kWhitespace);
  EXPECT_EQ(ClassifyEdit("paris", "Paris"), EditKind::kCapitalization);
  EXPECT_EQ(ClassifyEdit("home", "home."), EditKind::kPunctuation);
  EXPECT_EQ(ClassifyEdit("Hello ,", "Hello,"), EditKind::kWhitespace);
  EXPECT_EQ(ClassifyEdit("well;", "well,"), EditKind::kPunctuation);
  EXPECT_EQ(ClassifyEdit("go", "goes"), EditKind::kWordForm);
  EXPECT_EQ(ClassifyEdit("child", "children"), EditKind::kWordForm);
  EXPECT_EQ(ClassifyEdit("swimmed", "swam"), EditKind::kWordChoice);  // irregular: no stem
  EXPECT_EQ(ClassifyEdit("recieve", "receive"), EditKind::kSpelling);
  EXPECT_EQ(ClassifyEdit("tecnologies", "technologies"), EditKind::kSpelling);
  EXPECT_EQ(ClassifyEdit("big", "large"), EditKind::kWordChoice);
  EXPECT_EQ(ClassifyEdit("", "the "), EditKind::kMissingWord);
  EXPECT_EQ(ClassifyEdit("very very", "very"), EditKind::kUnnecessaryWord);
  EXPECT_EQ(ClassifyEdit("always is", "is always"), EditKind::kWordOrder);
  EXPECT_EQ(ClassifyEdit("a apple", "an apple"), EditKind::kWordForm);  // "a" is a prefix
  EXPECT_EQ(ClassifyEdit("he go to", "they went into"), EditKind::kOther);
}

}  // namespace
}  // namespace gecd::text
