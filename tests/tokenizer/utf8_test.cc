#include "tokenizer/utf8.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::model {
namespace {

TEST(ToValidUtf8Test, KeepsValidTextAndReplacesEachBadByte) {
  EXPECT_EQ(ToValidUtf8("caf\xC3\xA9 \xE6\x97\xA5"), "caf\xC3\xA9 \xE6\x97\xA5");
  // A cut 3-byte sequence at the end, a lone continuation byte, a surrogate.
  EXPECT_EQ(ToValidUtf8("ok\xE6\x97"), "ok\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ToValidUtf8("a\x80z"), "a\xEF\xBF\xBDz");
  EXPECT_TRUE(ValidateUtf8(ToValidUtf8("\xED\xA0\x80")).ok());
}

TEST(CodepointTest, EncodesAndDecodesEveryLength) {
  std::string text;
  for (char32_t cp : {U'a', U'\u00e9', U'\u65e5', U'\U0001F600'}) AppendUtf8(cp, &text);
  EXPECT_EQ(text, "a\xC3\xA9\xE6\x97\xA5\xF0\x9F\x98\x80");
  size_t i = 0;
  std::vector<char32_t> decoded;
  while (i < text.size()) decoded.push_back(NextCodepoint(text, &i));
  EXPECT_EQ(decoded, (std::vector<char32_t>{U'a', U'\u00e9', U'\u65e5', U'\U0001F600'}));
  EXPECT_EQ(LastCodepointStart(text), 6u);
  EXPECT_EQ(LastCodepointStart("ab"), 1u);
  EXPECT_TRUE(IsAscii("plain text"));
  EXPECT_FALSE(IsAscii(text));
}

TEST(NfcTest, ComposesDecomposedText) {
  absl::StatusOr<std::string> nfc = Nfc("cafe\xCC\x81");  // e + combining acute
  ASSERT_TRUE(nfc.ok()) << nfc.status();
  EXPECT_EQ(*nfc, "caf\xC3\xA9");
}

}  // namespace
}  // namespace gecd::model
