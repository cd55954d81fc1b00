#include "server/request_validator.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/byte_level_tokenizer.h"
#include "testing/scoped_temp_dir.h"

namespace gecd::server {
namespace {

using ::testing::HasSubstr;

class RequestValidatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gecd::testing::WriteByteLevelTokenizer(model_dir_.path());
    auto tokenizer = model::Tokenizer::LoadFromModelDir(model_dir_.path());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    config_.model.prompt_template = "Correct: {text}\nAnswer:";
    config_.model.max_input_tokens = 40;
    config_.model.max_output_tokens = 64;
    config_.server.max_input_chars = 20;
  }

  void ExpectInvalid(std::string_view text, std::string_view message_part) {
    const RequestValidator validator(config_, *tokenizer_);
    absl::StatusOr<Prompt> prompt = validator.Validate(text, 0);
    ASSERT_EQ(prompt.status().code(), absl::StatusCode::kInvalidArgument) << prompt.status();
    EXPECT_THAT(std::string(prompt.status().message()), HasSubstr(std::string(message_part)));
  }

  gecd::testing::ScopedTempDir model_dir_;
  config::Config config_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
};

TEST_F(RequestValidatorTest, AppliesTheTemplateBeforeTokenizing) {
  const RequestValidator validator(config_, *tokenizer_);
  absl::StatusOr<Prompt> prompt = validator.Validate("She go home.", 0);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->tokens, *tokenizer_->Encode("Correct: She go home.\nAnswer:"));
}

TEST_F(RequestValidatorTest, TheSpellingStageRunsBeforeTheTemplate) {
  if (!std::filesystem::exists("/usr/share/hunspell/en_US.dic")) {
    GTEST_SKIP() << "Debian package hunspell-en-us not installed";
  }
  const std::string lexicon = model_dir_.path() + "/lexicon.tsv";
  std::ofstream(lexicon) << "friend\t10\n";
  auto spelling = model::SpellCorrector::Create("/usr/share/hunspell/en_US", lexicon, 3);
  ASSERT_TRUE(spelling.ok()) << spelling.status();
  const RequestValidator validator(config_, *tokenizer_, spelling->get());
  absl::StatusOr<Prompt> prompt = validator.Validate("My freind", 0);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->tokens, *tokenizer_->Encode("Correct: My friend\nAnswer:"));
}

TEST_F(RequestValidatorTest, OutputTokensDefaultToAndAreCappedAtTheConfig) {
  const RequestValidator validator(config_, *tokenizer_);
  EXPECT_EQ(validator.Validate("a", 0)->max_new_tokens, 64);
  EXPECT_EQ(validator.Validate("a", 10)->max_new_tokens, 10);
  EXPECT_EQ(validator.Validate("a", 1000)->max_new_tokens, 64);
}

TEST_F(RequestValidatorTest, RefusesEmptyText) { ExpectInvalid("", "empty"); }

TEST_F(RequestValidatorTest, RefusesInvalidUtf8) {
  ExpectInvalid("bad \xC3\x28 byte", "UTF-8");
  ExpectInvalid("\xED\xA0\x80", "UTF-8");  // a surrogate
}

TEST_F(RequestValidatorTest, CharacterLimitCountsCodePointsAndNamesTheKey) {
  config_.model.max_input_tokens = 1000;  // only the character limit applies here
  const RequestValidator validator(config_, *tokenizer_);
  // 20 characters in 40 bytes is within the limit of 20 characters.
  EXPECT_TRUE(validator.Validate(std::string(10, 'a') + "éééééééééé", 0).ok());
  ExpectInvalid(std::string(21, 'a'), "server.max_input_chars");
  ExpectInvalid(std::string(21, 'a'), "21 characters");
}

TEST_F(RequestValidatorTest, TokenLimitCountsTheTemplatedPromptAndNamesTheKey) {
  config_.server.max_input_chars = 2000;
  const std::string text = "the cat sat on the mat and the dog ran to the park with the ball";
  const size_t prompt_tokens = tokenizer_->Encode("Correct: " + text + "\nAnswer:")->size();
  config_.model.max_input_tokens = static_cast<int>(prompt_tokens);
  EXPECT_TRUE(RequestValidator(config_, *tokenizer_).Validate(text, 0).ok());
  config_.model.max_input_tokens = static_cast<int>(prompt_tokens) - 1;
  ExpectInvalid(text, "model.max_input_tokens");
}

}  // namespace
}  // namespace gecd::server
