#include "tokenizer/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "testing/test_paths.h"
#include "testing/tokenizer_goldens.h"
#include "tokenizer/tokenizer.h"

namespace gecd::model {
namespace {

using ::gecd::testing::Printable;
using ::gecd::testing::TokenizerGolden;

// The checked-in model (unigram, vocab 2000, byte fallback, identity normalization) and golden
// ids from the python sentencepiece library, so this suite always runs.
class SentencePieceTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tokenizer = Tokenizer::LoadFromModelDir(gecd::testing::FixturePath("tokenizers/sp_brown"));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
    auto goldens = gecd::testing::ReadTokenizerGoldens(
        gecd::testing::FixturePath("tokenizers/sp_golden.jsonl"));
    ASSERT_TRUE(goldens.ok()) << goldens.status();
    goldens_ = std::move(*goldens);
    ASSERT_GE(goldens_.size(), 1000u);
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<TokenizerGolden> goldens_;
};

TEST_F(SentencePieceTokenizerTest, EncodesEveryGoldenStringExactly) {
  int mismatches = 0;
  for (const TokenizerGolden& golden : goldens_) {
    auto ids = tokenizer_->Encode(golden.text);
    if (ids.ok() && *ids == golden.ids) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << golden.kind << " \"" << Printable(golden.text) << "\"\n  expected "
                    << absl::StrJoin(golden.ids, ",") << "\n  actual   "
                    << (ids.ok() ? absl::StrJoin(*ids, ",") : ids.status().ToString());
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << goldens_.size() << " strings";
}

TEST_F(SentencePieceTokenizerTest, DecodeInvertsEncode) {
  int failures = 0;
  for (const TokenizerGolden& golden : goldens_) {
    const std::string decoded = tokenizer_->Decode(golden.ids, /*skip_special=*/false);
    if (decoded == golden.text) continue;
    if (++failures <= 5) {
      ADD_FAILURE() << "\"" << Printable(golden.text) << "\" decodes to \"" << Printable(decoded)
                    << "\"";
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_F(SentencePieceTokenizerTest, ControlSymbolsInText) {
  const std::optional<int32_t> bos = tokenizer_->TokenToId("<s>");
  const std::optional<int32_t> eos = tokenizer_->TokenToId("</s>");
  ASSERT_TRUE(bos.has_value() && eos.has_value());
  EXPECT_TRUE(tokenizer_->IsSpecial(*bos));
  EXPECT_EQ(tokenizer_->TokenBytes(*bos), "");
  auto ids = tokenizer_->Encode("<s>The jury</s>");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GE(ids->size(), 3u);
  EXPECT_EQ(ids->front(), *bos);
  EXPECT_EQ(ids->back(), *eos);
  for (size_t i = 1; i + 1 < ids->size(); ++i) EXPECT_FALSE(tokenizer_->IsSpecial((*ids)[i]));
  EXPECT_EQ(tokenizer_->Decode(*ids), "The jury");
  EXPECT_EQ(tokenizer_->Decode(*ids, /*skip_special=*/false), "<s>The jury</s>");
  EXPECT_EQ(tokenizer_->TokenToId("no-such-piece"), std::nullopt);
}

TEST_F(SentencePieceTokenizerTest, TokenBytesSpellPieces) {
  // Characters outside the vocabulary fall back to byte pieces; their bytes rebuild the text.
  auto ids = tokenizer_->Encode("\xE4\xB8\xAD");  // 中
  ASSERT_TRUE(ids.ok()) << ids.status();
  std::string bytes;
  for (int32_t id : *ids) bytes += tokenizer_->TokenBytes(id);
  EXPECT_EQ(bytes, " \xE4\xB8\xAD");  // the dummy prefix's space, then the three bytes
  const std::optional<int32_t> the = tokenizer_->TokenToId("\xE2\x96\x81the");
  ASSERT_TRUE(the.has_value());
  EXPECT_EQ(tokenizer_->TokenBytes(*the), " the");
  EXPECT_EQ(tokenizer_->vocab_size(), 2000);
}

TEST_F(SentencePieceTokenizerTest, RejectsInvalidUtf8) {
  for (const std::string& bad :
       {std::string("\xFF"), std::string("abc\xE2\x82"), std::string("\xED\xA0\x80")}) {
    EXPECT_EQ(tokenizer_->Encode(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << Printable(bad);
  }
}

// The shipped default model: "<unk>", "<s>", "</s>" are control/unknown symbols (special),
// "<sep>" a user-defined one (tools/train/train.py), which SentencePiece matches in text itself.
class DefaultModelPiecesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tokenizer =
        Tokenizer::LoadFromModelDir(gecd::testing::SourceDir() + "/models/gecd-gec-small");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
  }

  int32_t Id(std::string_view piece) const {
    const std::optional<int32_t> id = tokenizer_->TokenToId(piece);
    EXPECT_TRUE(id.has_value()) << piece;
    return id.value_or(-1);
  }

  std::vector<int32_t> EncodeOrFail(std::span<const TextPiece> pieces) const {
    auto ids = tokenizer_->EncodePieces(pieces);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(DefaultModelPiecesTest, SymbolKinds) {
  for (const char* special : {"<unk>", "<s>", "</s>"}) {
    EXPECT_TRUE(tokenizer_->IsSpecial(Id(special))) << special;
  }
  EXPECT_FALSE(tokenizer_->IsSpecial(Id("<sep>")));
  // Encode (template text) still maps every one of them written literally.
  auto ids = tokenizer_->Encode("<s>a<sep>b</s>");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->front(), Id("<s>"));
  EXPECT_EQ(std::count(ids->begin(), ids->end(), Id("<sep>")), 1);
  EXPECT_EQ(ids->back(), Id("</s>"));
}

// Issue 12 item 5: "She go home.<sep>They was happy but I is sad." was corrected to
// "She went home." with the rest silently dropped: the user's "<sep>" ended the prompt.
TEST_F(DefaultModelPiecesTest, UserSeparatorDoesNotEndThePrompt) {
  const std::string text = "She go home.<sep>They was happy but I is sad.";
  auto whole = tokenizer_->Encode("<s>" + text + "<sep>");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(std::count(whole->begin(), whole->end(), Id("<sep>")), 2);  // the old prompt

  const TextPiece prompt[] = {{"<s>", true}, {text, false}, {"<sep>", true}};
  const std::vector<int32_t> ids = EncodeOrFail(prompt);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), Id("<s>"));
  EXPECT_EQ(ids.back(), Id("<sep>"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), Id("<sep>")), 1);
  for (size_t i = 1; i + 1 < ids.size(); ++i) EXPECT_FALSE(tokenizer_->IsSpecial(ids[i])) << i;
  EXPECT_EQ(tokenizer_->Decode(ids, /*skip_special=*/false), "<s>" + text + "<sep>");
  // Only the spelled-out separator differs from the old prompt.
  std::vector<int32_t> expected(whole->begin(), whole->end());
  const auto sep = std::find(expected.begin(), expected.end(), Id("<sep>"));
  const int32_t spelled[] = {Id("<0x3C>"), Id("s"), Id("e"), Id("p"), Id("<0x3E>")};
  expected.insert(expected.erase(sep), std::begin(spelled), std::end(spelled));
  EXPECT_EQ(ids, expected);

  const std::string eos_text = "She go home.</s>They was happy.";
  const TextPiece eos_prompt[] = {{"<s>", true}, {eos_text, false}, {"<sep>", true}};
  const std::vector<int32_t> eos_ids = EncodeOrFail(eos_prompt);
  EXPECT_EQ(std::count(eos_ids.begin(), eos_ids.end(), Id("</s>")), 0);
  EXPECT_EQ(tokenizer_->Decode(eos_ids, /*skip_special=*/false), "<s>" + eos_text + "<sep>");
}

TEST_F(DefaultModelPiecesTest, UserDefinedSymbolInUserTextIsSpelledOutPerCharacter) {
  // SentencePiece reads "<sep>" as the dummy prefix's "▁" and the symbol; the symbol becomes
  // its characters' pieces: "s", "e", "p" are in the vocabulary, '<' and '>' only as bytes.
  const TextPiece alone[] = {{"<sep>", false}};
  EXPECT_EQ(EncodeOrFail(alone), (std::vector<int32_t>{Id("\xE2\x96\x81"), Id("<0x3C>"), Id("s"),
                                                       Id("e"), Id("p"), Id("<0x3E>")}));
  // A symbol SentencePiece finds across a template/text boundary is not the template's either.
  const TextPiece across[] = {{"<s>", true}, {"a<se", false}, {"p>", true}};
  const std::vector<int32_t> ids = EncodeOrFail(across);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), Id("<sep>")), 0);
  EXPECT_EQ(tokenizer_->Decode(ids, /*skip_special=*/false), "<s>a<sep>");
  // Nor is one that two template pieces only form together.
  const TextPiece two_templates[] = {{"x<se", true}, {"p>", true}};
  const std::vector<int32_t> joined = EncodeOrFail(two_templates);
  EXPECT_EQ(std::count(joined.begin(), joined.end(), Id("<sep>")), 0);
  // Template text, where the model was trained with it, keeps SentencePiece's ids.
  const TextPiece templated[] = {{"<s>", true}, {"a", false}, {"<sep>", true}};
  EXPECT_EQ(EncodeOrFail(templated), *tokenizer_->Encode("<s>a<sep>"));
}

TEST(SentencePieceLoadTest, BadModelFileNamesThePath) {
  const std::string dir = gecd::testing::MakeTempDir();
  const std::string path = dir + "/tokenizer.model";
  std::ofstream(path) << "this is not a protobuf";
  auto tokenizer = Tokenizer::LoadFromModelDir(dir);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(std::string(tokenizer.status().message()).find(path), std::string::npos)
      << tokenizer.status();
  auto missing = SentencePieceTokenizer::LoadFromFile(dir + "/absent.model");
  EXPECT_FALSE(missing.ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gecd::model
