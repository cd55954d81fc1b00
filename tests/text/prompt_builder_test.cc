#include "text/prompt_builder.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/byte_level_tokenizer.h"
#include "testing/scoped_temp_dir.h"
#include "testing/test_paths.h"
#include "tokenizer/template_tokens.h"

namespace gecd::text {
namespace {

using ::testing::HasSubstr;

constexpr char kDictionary[] = "/usr/share/hunspell/en_US";

class PromptBuilderTest : public ::testing::Test {
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

  PromptBuilder Builder(const model::SpellCorrector* spelling = nullptr) const {
    absl::StatusOr<PromptBuilder> builder = PromptBuilder::Create(config_, *tokenizer_, spelling);
    EXPECT_TRUE(builder.ok()) << builder.status();
    return *std::move(builder);
  }

  // Check, then Build with no limit.
  absl::StatusOr<Prompt> BuildText(const PromptBuilder& builder, std::string_view text) const {
    absl::StatusOr<CheckedText> checked = builder.Check(text, 0);
    if (!checked.ok()) return checked.status();
    return builder.Build(*checked);
  }

  void ExpectInvalid(std::string_view text, std::string_view message_part) {
    absl::StatusOr<CheckedText> checked = Builder().Check(text, 0);
    ASSERT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument) << checked.status();
    EXPECT_THAT(std::string(checked.status().message()), HasSubstr(std::string(message_part)));
  }

  // A spelling stage that knows "friend" as a correction.
  std::unique_ptr<model::SpellCorrector> Spelling() {
    const std::string lexicon = model_dir_.path() + "/lexicon.tsv";
    std::ofstream(lexicon) << "friend\t10\nletter\t10\nbelieve\t10\nreceived\t10\n";
    auto spelling = model::SpellCorrector::Create(kDictionary, lexicon, 3);
    EXPECT_TRUE(spelling.ok()) << spelling.status();
    return spelling.ok() ? *std::move(spelling) : nullptr;
  }

  gecd::testing::ScopedTempDir model_dir_;
  config::Config config_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
};

bool HaveDictionary() { return std::filesystem::exists(std::string(kDictionary) + ".dic"); }

TEST_F(PromptBuilderTest, AppliesTheTemplateBeforeTokenizing) {
  absl::StatusOr<Prompt> prompt = BuildText(Builder(), "She go home.");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->tokens, *tokenizer_->Encode("Correct: She go home.\nAnswer:"));
  EXPECT_EQ(prompt->params.copy_bias, 0.0f);
}

TEST_F(PromptBuilderTest, TheSpellingStageRunsBeforeTheTemplate) {
  if (!HaveDictionary()) GTEST_SKIP() << "Debian package hunspell-en-us not installed";
  const std::unique_ptr<model::SpellCorrector> spelling = Spelling();
  absl::StatusOr<Prompt> prompt = BuildText(Builder(spelling.get()), "My freind");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->tokens, *tokenizer_->Encode("Correct: My friend\nAnswer:"));
  EXPECT_EQ(prompt->spelling.corrected, 1);
}

TEST_F(PromptBuilderTest, TheSpellingStageStopsAtItsLookupCapAndDeadline) {
  if (!HaveDictionary()) GTEST_SKIP() << "Debian package hunspell-en-us not installed";
  const std::unique_ptr<model::SpellCorrector> spelling = Spelling();
  config_.server.max_input_chars = 200;
  config_.model.max_input_tokens = 200;
  config_.spelling.max_lookups = 2;
  const PromptBuilder builder = Builder(spelling.get());
  absl::StatusOr<CheckedText> checked = builder.Check("freind leter beleive recieved", 0);
  ASSERT_TRUE(checked.ok()) << checked.status();

  // A deadline already past: nothing is looked up, every candidate is kept and counted.
  model::SpellCorrector::Budget past;
  past.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  absl::StatusOr<Prompt> prompt = builder.Build(*checked, past);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->spelling.lookups, 0);
  EXPECT_EQ(prompt->spelling.skipped, 4);
  EXPECT_EQ(prompt->tokens, checked->tokens);

  // No deadline: spelling.max_lookups bounds the look-ups; the rest stay as written.
  prompt = builder.Build(*checked);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->spelling.lookups, 2);
  EXPECT_EQ(prompt->spelling.skipped, 2);
  EXPECT_EQ(prompt->spelling.text, "friend letter beleive recieved");
  // Cached answers cost nothing: a second request gets the first two for free.
  prompt = builder.Build(*checked);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->spelling.text, "friend letter believe received");
}

TEST_F(PromptBuilderTest, OutputTokensDefaultToAndAreCappedAtTheConfig) {
  const PromptBuilder builder = Builder();
  EXPECT_EQ(builder.Check("a", 0)->max_new_tokens, 64);
  EXPECT_EQ(builder.Check("a", 10)->max_new_tokens, 10);
  EXPECT_EQ(builder.Check("a", 1000)->max_new_tokens, 64);
  EXPECT_EQ(builder.Build(*builder.Check("a", 10))->params.max_new_tokens, 10);
}

TEST_F(PromptBuilderTest, RefusesEmptyText) { ExpectInvalid("", "empty"); }

TEST_F(PromptBuilderTest, RefusesInvalidUtf8) {
  ExpectInvalid("bad \xC3\x28 byte", "UTF-8");
  ExpectInvalid("\xED\xA0\x80", "UTF-8");  // a surrogate
}

TEST_F(PromptBuilderTest, RefusesControlCharactersNamingThemAndWhere) {
  ExpectInvalid(std::string("a\0b", 3), "U+0000 at byte 1");
  ExpectInvalid(std::string(5, '\0'), "U+0000 at byte 0");
  ExpectInvalid("ab\x1b[31m", "U+001B at byte 2");
  ExpectInvalid("a\x7f", "U+007F");
  ExpectInvalid("\xC2\x85", "U+0085");  // NEL, a C1 control
  // The whitespace controls of ordinary text pass.
  EXPECT_TRUE(Builder().Check("a\tb\nc\r\n", 0).ok());
}

TEST_F(PromptBuilderTest, WhitespaceOnlyTextIsAnsweredUnchangedWithoutTheModel) {
  config_.server.max_input_chars = 2000;
  const PromptBuilder builder = Builder();
  for (const std::string& text : {std::string(2000, ' '), std::string(" \n\t\r "),
                                  std::string("\xC2\xA0\xE3\x80\x80")}) {  // NBSP, ideographic
    absl::StatusOr<CheckedText> checked = builder.Check(text, 0);
    ASSERT_TRUE(checked.ok()) << checked.status();
    EXPECT_TRUE(checked->unchanged);
    EXPECT_TRUE(checked->tokens.empty());
  }
  EXPECT_FALSE(builder.Check(" a ", 0)->unchanged);
}

TEST_F(PromptBuilderTest, CharacterLimitCountsCodePointsAndNamesTheKey) {
  config_.model.max_input_tokens = 1000;  // only the character limit applies here
  // 20 characters in 40 bytes is within the limit of 20 characters.
  EXPECT_TRUE(Builder().Check(std::string(10, 'a') + "éééééééééé", 0).ok());
  ExpectInvalid(std::string(21, 'a'), "server.max_input_chars");
  ExpectInvalid(std::string(21, 'a'), "21 characters");
}

TEST_F(PromptBuilderTest, TokenLimitIsCheckedOnTheTextAsWrittenBeforeAnySpelling) {
  config_.server.max_input_chars = 2000;
  const std::string text = "the cat sat on the mat and the dog ran to the park with the ball";
  const size_t prompt_tokens = tokenizer_->Encode("Correct: " + text + "\nAnswer:")->size();
  config_.model.max_input_tokens = static_cast<int>(prompt_tokens);
  EXPECT_TRUE(Builder().Check(text, 0).ok());
  config_.model.max_input_tokens = static_cast<int>(prompt_tokens) - 1;
  ExpectInvalid(text, "model.max_input_tokens");
}

TEST_F(PromptBuilderTest, CopyBiasCoversTheUsersTextInThePrompt) {
  config_.model.copy_bias = 2;
  absl::StatusOr<Prompt> prompt = BuildText(Builder(), "She go home.");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->params.copy_bias, 2.0f);
  auto prompt_template = model::PromptTemplate::Parse(config_.model.prompt_template);
  auto template_tokens = model::TemplateTokens::Create(*prompt_template, *tokenizer_);
  ASSERT_TRUE(template_tokens.ok());
  const auto [begin, end] = template_tokens->TextSpan(prompt->tokens);
  EXPECT_EQ(prompt->params.copy_begin, begin);
  EXPECT_EQ(prompt->params.copy_end, end);
  EXPECT_GT(end, begin);
  EXPECT_EQ(tokenizer_->Decode(std::span(prompt->tokens).subspan(begin, end - begin)),
            "She go home.");
}

// The default model's template is "<s>{text}<sep>": its control tokens come only from there.
// A user who types "<sep>" or "</s>" must not end the prompt early (the model would answer
// the text before it and drop the rest) nor stop it.
TEST(PromptBuilderDefaultModelTest, UserTextNeverProducesTheTemplatesSpecialTokens) {
  const std::string dir = gecd::testing::SourceDir() + "/models/gecd-gec-small";
  auto tokenizer = model::Tokenizer::LoadFromModelDir(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  config::Config config;
  config.model.prompt_template = "<s>{text}<sep>";
  config.model.copy_bias = 2;
  absl::StatusOr<PromptBuilder> builder = PromptBuilder::Create(config, **tokenizer, nullptr);
  ASSERT_TRUE(builder.ok()) << builder.status();
  std::vector<int32_t> specials;
  for (int32_t id = 0; id < (*tokenizer)->vocab_size(); ++id) {
    if ((*tokenizer)->IsSpecial(id)) specials.push_back(id);
  }
  ASSERT_FALSE(specials.empty());
  const int32_t bos = *(*tokenizer)->TokenToId("<s>");
  const int32_t sep = *(*tokenizer)->TokenToId("<sep>");
  for (int32_t special : specials) {
    const std::string literal = (*tokenizer)->Decode(std::vector<int32_t>{special}, false);
    for (const std::string& text :
         {"She go home." + literal + "They was happy.", literal, literal + " a", "a " + literal}) {
      absl::StatusOr<CheckedText> checked = builder->Check(text, 0);
      ASSERT_TRUE(checked.ok()) << checked.status();
      absl::StatusOr<Prompt> prompt = builder->Build(*checked);
      ASSERT_TRUE(prompt.ok()) << prompt.status();
      const std::vector<int32_t>& ids = prompt->tokens;
      // Exactly the template's two: <s> first, <sep> last.
      ASSERT_GE(ids.size(), 3u);
      EXPECT_EQ(ids.front(), bos) << text;
      EXPECT_EQ(ids.back(), sep) << text;
      for (size_t i = 1; i + 1 < ids.size(); ++i) {
        EXPECT_FALSE((*tokenizer)->IsSpecial(ids[i])) << text << ": token " << i << " is special";
      }
      // The copy span holds the whole text, which reads back as typed.
      const auto span = std::span(ids).subspan(prompt->params.copy_begin,
                                               prompt->params.copy_end - prompt->params.copy_begin);
      EXPECT_EQ((*tokenizer)->Decode(span, false), text);
    }
  }
}

}  // namespace
}  // namespace gecd::text
