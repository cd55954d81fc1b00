#include "model/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/sentencepiece_tokenizer.h"
#include "nlohmann/json.hpp"
#include "testing/scoped_temp_dir.h"
#include "testing/test_paths.h"

namespace gecd::model {
namespace {

using ::gecd::testing::FixturePath;
using ::gecd::testing::ScopedTempDir;
using nlohmann::json;
using ::testing::HasSubstr;

// The shape of a Mistral tokenizer.json: SentencePiece converted to BPE with a Metaspace
// pre-tokenizer and byte fallback, which the byte-level BpeTokenizer refuses as Unimplemented.
json MetaspaceTokenizerJson() {
  const json metaspace = {{"type", "Metaspace"},
                          {"replacement", "\xE2\x96\x81"},
                          {"prepend_scheme", "first"},
                          {"split", false}};
  return json{{"version", "1.0"},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", metaspace},
              {"post_processor", nullptr},
              {"decoder", metaspace},
              {"model",
               {{"type", "BPE"},
                {"unk_token", "<unk>"},
                {"byte_fallback", true},
                {"vocab", {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"\xE2\x96\x81", 3}}},
                {"merges", json::array()}}}};
}

class LoadFromModelDirTest : public ::testing::Test {
 protected:
  std::string JsonPath() const { return dir_.path() + "/tokenizer.json"; }
  void WriteTokenizerJson(const std::string& text) const { std::ofstream(JsonPath()) << text; }
  void CopySentencePieceModel() const {
    std::filesystem::copy_file(kSentencePieceModel, dir_.path() + "/tokenizer.model");
  }

  const std::string kSentencePieceModel = FixturePath("tokenizers/sp_brown/tokenizer.model");
  ScopedTempDir dir_;
};

TEST_F(LoadFromModelDirTest, UnimplementedTokenizerJsonFallsBackToTokenizerModel) {
  WriteTokenizerJson(MetaspaceTokenizerJson().dump());
  CopySentencePieceModel();
  auto tokenizer = Tokenizer::LoadFromModelDir(dir_.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto reference = SentencePieceTokenizer::LoadFromFile(kSentencePieceModel);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), (*reference)->vocab_size());
  const std::string text = "The jury further said that the city's election was well conducted.";
  auto ids = (*tokenizer)->Encode(text);
  auto expected = (*reference)->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(*ids, *expected);
}

TEST_F(LoadFromModelDirTest, UnimplementedTokenizerJsonAloneIsAnError) {
  WriteTokenizerJson(MetaspaceTokenizerJson().dump());
  auto tokenizer = Tokenizer::LoadFromModelDir(dir_.path());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kUnimplemented) << tokenizer.status();
  EXPECT_THAT(std::string(tokenizer.status().message()), HasSubstr(JsonPath()));
}

TEST_F(LoadFromModelDirTest, MalformedTokenizerJsonIsAnErrorEvenBesideTokenizerModel) {
  WriteTokenizerJson(MetaspaceTokenizerJson().dump().substr(0, 100));
  CopySentencePieceModel();
  auto tokenizer = Tokenizer::LoadFromModelDir(dir_.path());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument) << tokenizer.status();
  EXPECT_THAT(std::string(tokenizer.status().message()), HasSubstr(JsonPath()));
}

}  // namespace
}  // namespace gecd::model
