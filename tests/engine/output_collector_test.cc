#include "pipeline/output_collector.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/byte_level_tokenizer.h"
#include "testing/scoped_temp_dir.h"

namespace gecd::pipeline {
namespace {

using engine::FinishReason;
using engine::StepEvent;

TEST(OutputCollectorTest, AStopTokenEndsTheOutputWithoutBeingPartOfIt) {
  OutputCollector outputs;
  EXPECT_FALSE(outputs.Add({.id = 1, .token = 10}));
  EXPECT_FALSE(outputs.Add({.id = 2, .token = 20}));
  EXPECT_TRUE(
      outputs.Add({.id = 1, .token = 99, .finished = true, .reason = FinishReason::kStopToken}));
  EXPECT_EQ(outputs.Take(1), (std::vector<int32_t>{10}));
  // The length limit's last token is output.
  EXPECT_TRUE(
      outputs.Add({.id = 2, .token = 21, .finished = true, .reason = FinishReason::kLength}));
  EXPECT_EQ(outputs.Take(2), (std::vector<int32_t>{20, 21}));
  // Taken outputs are forgotten.
  EXPECT_TRUE(outputs.Take(1).empty());
}

TEST(OutputCollectorTest, TextIsValidUtf8EvenWhenTheModelStopsInsideACharacter) {
  gecd::testing::ScopedTempDir dir;
  gecd::testing::WriteByteLevelTokenizer(dir.path());
  auto tokenizer = model::Tokenizer::LoadFromModelDir(dir.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::vector<int32_t> ids = *(*tokenizer)->Encode("café");
  EXPECT_EQ(OutputCollector::Text(**tokenizer, ids), "café");
  // Cut the last byte of "é" off, wherever the tokens split it.
  const std::string bytes = (*tokenizer)->Decode(ids);
  ids = *(*tokenizer)->Encode(std::string_view(bytes).substr(0, 3));
  ids.push_back(*(*tokenizer)->TokenToId("Ã"));  // the byte 0xC3 in byte-level spelling
  EXPECT_EQ(OutputCollector::Text(**tokenizer, ids), "caf\xEF\xBF\xBD");  // U+FFFD
}

}  // namespace
}  // namespace gecd::pipeline
