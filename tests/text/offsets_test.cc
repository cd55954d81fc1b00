#include "text/offsets.h"

#include <string>

#include "gtest/gtest.h"

namespace gecd::text {
namespace {

TEST(OffsetsTest, BytesStayBytes) {
  const OffsetConverter c("a\u00e9\U0001F600", OffsetUnit::kUtf8Bytes);
  EXPECT_EQ(c(0), 0u);
  EXPECT_EQ(c(3), 3u);
  EXPECT_EQ(c(7), 7u);
}

TEST(OffsetsTest, CodePointsAndUtf16CountEachCharacterItsWay) {
  // a (1 byte), é (2), 日 (3), 😀 (4: a surrogate pair), e + U+0301 (1 + 2), CR LF.
  const std::string text = "a\u00e9\u65e5\U0001F600e\u0301\r\n";
  const OffsetConverter cp(text, OffsetUnit::kCodePoints);
  const OffsetConverter u16(text, OffsetUnit::kUtf16CodeUnits);
  const uint32_t bytes[] = {0, 1, 3, 6, 10, 11, 13, 14, 15};
  const uint32_t points[] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  const uint32_t units[] = {0, 1, 2, 3, 5, 6, 7, 8, 9};
  for (size_t i = 0; i < std::size(bytes); ++i) {
    EXPECT_EQ(cp(bytes[i]), points[i]) << bytes[i];
    EXPECT_EQ(u16(bytes[i]), units[i]) << bytes[i];
  }
}

TEST(OffsetsTest, AnEmptyTextHasOnlyOffsetZero) {
  EXPECT_EQ(OffsetConverter("", OffsetUnit::kUtf16CodeUnits)(0), 0u);
}

}  // namespace
}  // namespace gecd::text
