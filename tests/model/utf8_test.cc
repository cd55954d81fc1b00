#include "model/utf8.h"

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

}  // namespace
}  // namespace gecd::model
