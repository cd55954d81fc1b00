// Where the user's text lies in a tokenized prompt (the span the copy bias follows).
#include "tokenizer/template_tokens.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/test_paths.h"
#include "tokenizer/tokenizer.h"

namespace gecd::model {
namespace {

// One token per byte, except that "ab" is one token (1000): a text starting with "b" merges
// with a template ending in "a".
class MergingTokenizer : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> EncodePieces(
      std::span<const TextPiece> pieces) const override {
    std::string text;
    for (const TextPiece& piece : pieces) text += piece.text;
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.substr(i, 2) == "ab") {
        ids.push_back(1000);
        ++i;
      } else {
        ids.push_back(static_cast<unsigned char>(text[i]));
      }
    }
    return ids;
  }
  std::string Decode(std::span<const int32_t>, bool) const override { return ""; }
  std::string TokenBytes(int32_t) const override { return ""; }
  int32_t vocab_size() const override { return 1001; }
  std::optional<int32_t> TokenToId(std::string_view) const override { return std::nullopt; }
  bool IsSpecial(int32_t) const override { return false; }
};

std::pair<int, int> Span(const std::string& pattern, const std::string& text) {
  const MergingTokenizer tokenizer;
  const PromptTemplate t = *PromptTemplate::Parse(pattern);
  const TemplateTokens tokens = *TemplateTokens::Create(t, tokenizer);
  return tokens.TextSpan(*tokenizer.Encode(t.Apply(text)));
}

TEST(TemplateTokensTest, TheTextIsWhatTheTemplateDoesNotShare) {
  EXPECT_EQ(Span("<{text}>", "xyz"), std::make_pair(1, 4));
  EXPECT_EQ(Span("{text}", "xyz"), std::make_pair(0, 3));
  EXPECT_EQ(Span("P: {text}\n", "hi"), std::make_pair(3, 5));
}

TEST(TemplateTokensTest, APieceMergedAcrossTheBoundaryBelongsToTheText) {
  // "xa" + "bc" -> x, ab, c: the prefix's "a" merged into the text's first piece.
  EXPECT_EQ(Span("xa{text}", "bc"), std::make_pair(1, 3));
  // "c" + "ab" + ... -> the text "ca" merges with the suffix "b".
  EXPECT_EQ(Span("{text}bz", "ca"), std::make_pair(0, 2));
}

TEST(TemplateTokensTest, AnEmptyTextIsAnEmptySpan) {
  const auto [begin, end] = Span("<{text}>", "");
  EXPECT_EQ(begin, end);
}

TEST(TemplateTokensTest, TheDefaultModelsTemplateLeavesOutBosAndSeparator) {
  const std::string dir = gecd::testing::SourceDir() + "/models/gecd-gec-small";
  auto tokenizer = Tokenizer::LoadFromModelDir(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const PromptTemplate t = *PromptTemplate::Parse("<s>{text}<sep>");
  auto tokens = TemplateTokens::Create(t, **tokenizer);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const std::vector<int32_t> prompt = *(*tokenizer)->Encode(t.Apply("She go home."));
  const std::vector<int32_t> text = *(*tokenizer)->Encode("She go home.");
  const auto [begin, end] = tokens->TextSpan(prompt);
  EXPECT_EQ(std::vector<int32_t>(prompt.begin() + begin, prompt.begin() + end), text);
}

}  // namespace
}  // namespace gecd::model
