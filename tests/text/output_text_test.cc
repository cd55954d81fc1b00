#include "text/output_text.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/byte_level_tokenizer.h"
#include "testing/scoped_temp_dir.h"

namespace gecd::text {
namespace {

TEST(OutputTextTest,
     IsValidUtf8EvenWhenTheModelStopsInsideACharacterEvenWhenTheModelStopsInsideACharacter) {
  gecd::testing::ScopedTempDir dir;
  gecd::testing::WriteByteLevelTokenizer(dir.path());
  auto tokenizer = model::Tokenizer::LoadFromModelDir(dir.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::vector<int32_t> ids = *(*tokenizer)->Encode("café");
  EXPECT_EQ(OutputText(**tokenizer, ids), "café");
  // Cut the last byte of "é" off, wherever the tokens split it.
  const std::string bytes = (*tokenizer)->Decode(ids);
  ids = *(*tokenizer)->Encode(std::string_view(bytes).substr(0, 3));
  ids.push_back(*(*tokenizer)->TokenToId("Ã"));  // the byte 0xC3 in byte-level spelling
  EXPECT_EQ(OutputText(**tokenizer, ids), "caf\xEF\xBF\xBD");  // U+FFFD
}

}  // namespace
}  // namespace gecd::text
