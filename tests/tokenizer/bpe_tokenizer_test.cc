#include "tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "testing/byte_level_vocab.h"
#include "testing/test_paths.h"
#include "testing/tokenizer_goldens.h"
#include "tokenizer/tokenizer.h"

namespace gecd::model {
namespace {

using ::gecd::testing::Printable;
using ::gecd::testing::TokenizerGolden;
using nlohmann::json;

// A tiny GPT-2-style tokenizer.json: ids 0-255 are the bytes (id == byte value), then
// he=256, ll=257, hell=258, hello=259 from the merges "h e", "l l", "he ll", "hell o".
json TinyTokenizerJson() {
  json vocab = gecd::testing::ByteLevelVocab();
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array({"h e", json::array({"l", "l"}), "he ll", "hell o"})}}},
  };
}

json AddedToken(int id, const std::string& content, bool special, bool lstrip = false,
                bool rstrip = false, bool single_word = false, bool normalized = false) {
  return json{{"id", id},
              {"content", content},
              {"special", special},
              {"lstrip", lstrip},
              {"rstrip", rstrip},
              {"single_word", single_word},
              {"normalized", normalized}};
}

std::unique_ptr<BpeTokenizer> LoadTiny(const json& config) {
  auto tokenizer = BpeTokenizer::LoadFromJson(config.dump(), "tiny/tokenizer.json");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

std::vector<int32_t> EncodeOrDie(const Tokenizer& tokenizer, std::string_view text) {
  auto ids = tokenizer.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(BpeTokenizerTest, MergesByRankLeftmostFirst) {
  auto tokenizer = LoadTiny(TinyTokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(EncodeOrDie(*tokenizer, "hello"), (std::vector<int32_t>{259}));
  // " hello" is one pre-token: the space byte stays a symbol of its own.
  EXPECT_EQ(EncodeOrDie(*tokenizer, "hello hello"), (std::vector<int32_t>{259, ' ', 259}));
  // "l l" applies to the leftmost pair first, leaving the third l alone.
  EXPECT_EQ(EncodeOrDie(*tokenizer, "lll"), (std::vector<int32_t>{257, 'l'}));
  EXPECT_EQ(EncodeOrDie(*tokenizer, "hehell"), (std::vector<int32_t>{256, 258}));
  EXPECT_EQ(EncodeOrDie(*tokenizer, ""), std::vector<int32_t>{});
  EXPECT_EQ(tokenizer->vocab_size(), 260);
  EXPECT_EQ(tokenizer->TokenToId("hell"), 258);
  EXPECT_EQ(tokenizer->TokenToId("\xC4\xA0"), ' ');  // "Ġ", the byte-level space
  EXPECT_EQ(tokenizer->TokenToId("nope"), std::nullopt);
  EXPECT_EQ(tokenizer->TokenBytes(' '), " ");
  EXPECT_EQ(tokenizer->TokenBytes(259), "hello");
  EXPECT_EQ(tokenizer->TokenBytes(5000), "");
}

TEST(BpeTokenizerTest, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  json config = TinyTokenizerJson();
  // "lo" is in the vocabulary but no merge builds it; ignore_merges looks whole words up first.
  config["model"]["vocab"]["lo"] = 260;
  EXPECT_EQ(EncodeOrDie(*LoadTiny(config), "lo"), (std::vector<int32_t>{'l', 'o'}));
  config["model"]["ignore_merges"] = true;
  EXPECT_EQ(EncodeOrDie(*LoadTiny(config), "lo"), (std::vector<int32_t>{260}));
}

TEST(BpeTokenizerTest, AddedTokensHonourStripAndSingleWord) {
  json config = TinyTokenizerJson();
  config["added_tokens"] = json::array({
      AddedToken(260, "<s>", true),
      AddedToken(261, "<x>", false, /*lstrip=*/true, /*rstrip=*/true),
      AddedToken(262, "<w>", false, false, false, /*single_word=*/true),
      AddedToken(263, "<s>>", true),
  });
  auto tokenizer = LoadTiny(config);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(EncodeOrDie(*tokenizer, "hello<s>hello"), (std::vector<int32_t>{259, 260, 259}));
  // Leftmost-longest: "<s>>" wins over "<s>".
  EXPECT_EQ(EncodeOrDie(*tokenizer, "<s>>"), (std::vector<int32_t>{263}));
  // lstrip/rstrip swallow the whitespace around the token.
  EXPECT_EQ(EncodeOrDie(*tokenizer, "a  <x>\t b"), (std::vector<int32_t>{'a', 261, 'b'}));
  // single_word only matches between non-word characters.
  EXPECT_EQ(EncodeOrDie(*tokenizer, "a<w>b"), (std::vector<int32_t>{'a', '<', 'w', '>', 'b'}));
  EXPECT_EQ(EncodeOrDie(*tokenizer, "a <w> b"), (std::vector<int32_t>{'a', ' ', 262, ' ', 'b'}));

  EXPECT_TRUE(tokenizer->IsSpecial(260));
  EXPECT_FALSE(tokenizer->IsSpecial(261));
  EXPECT_FALSE(tokenizer->IsSpecial('a'));
  EXPECT_EQ(tokenizer->TokenToId("<x>"), 261);
  EXPECT_EQ(tokenizer->TokenBytes(260), "");
  EXPECT_EQ(tokenizer->TokenBytes(261), "<x>");
  const std::vector<int32_t> ids = {259, 260, 261, 259};
  EXPECT_EQ(tokenizer->Decode(ids), "hello<x>hello");
  EXPECT_EQ(tokenizer->Decode(ids, /*skip_special=*/false), "hello<s><x>hello");
}

TEST(BpeTokenizerTest, NormalizedAddedTokensMatchAfterNfc) {
  json config = TinyTokenizerJson();
  config["normalizer"] = {{"type", "NFC"}};
  const std::string composed = "\xC3\xA9";     // é
  const std::string decomposed = "e\xCC\x81";  // e + combining acute
  config["added_tokens"] = json::array({AddedToken(260, decomposed, false, false, false, false,
                                                   /*normalized=*/true),
                                        AddedToken(261, "e\xCC\x82", false)});
  auto tokenizer = LoadTiny(config);
  ASSERT_NE(tokenizer, nullptr);
  // The normalized token is matched in NFC form, whichever form the input uses.
  EXPECT_EQ(EncodeOrDie(*tokenizer, composed), (std::vector<int32_t>{260}));
  EXPECT_EQ(EncodeOrDie(*tokenizer, decomposed), (std::vector<int32_t>{260}));
  // The non-normalized one only matches the raw input; NFC then composes the rest (ê = C3 AA).
  EXPECT_EQ(EncodeOrDie(*tokenizer, "e\xCC\x82"), (std::vector<int32_t>{261}));
  EXPECT_EQ(EncodeOrDie(*tokenizer, "\xC3\xAA"), (std::vector<int32_t>{0xC3, 0xAA}));
}

TEST(BpeTokenizerTest, SplitStringPatternsAndRemovedBehaviour) {
  json config = TinyTokenizerJson();
  config["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"},
                     {"pattern", {{"String", "."}}},
                     {"behavior", "Removed"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  auto tokenizer = LoadTiny(config);
  ASSERT_NE(tokenizer, nullptr);
  // "." is literal (not "any character") and Removed drops it. Without ByteLevel's regex
  // "x hello" stays one word: the space is merged around, not split off.
  EXPECT_EQ(EncodeOrDie(*tokenizer, "hello.hello"), (std::vector<int32_t>{259, 259}));
  EXPECT_EQ(EncodeOrDie(*tokenizer, "x hello"), (std::vector<int32_t>{'x', ' ', 259}));
}

TEST(BpeTokenizerTest, RejectsInvalidUtf8) {
  auto tokenizer = LoadTiny(TinyTokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  for (const std::string& bad :
       {std::string("\xFF"), std::string("abc\xC3"), std::string("\xC0\xAF"),
        std::string("\xED\xA0\x80"), std::string("\xF4\x90\x80\x80"), std::string("ok\x80ok")}) {
    auto ids = tokenizer->Encode(bad);
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument) << Printable(bad);
  }
  EXPECT_TRUE(tokenizer->Encode(std::string("nul\0inside", 10)).ok());
}

struct BrokenCase {
  std::string name;
  std::function<void(json&)> corrupt;
  absl::StatusCode code;
  std::string field;  // must appear in the message
};

TEST(BpeTokenizerTest, MalformedFilesNameTheFileAndField) {
  const std::vector<BrokenCase> cases = {
      {"no_model", [](json& j) { j.erase("model"); }, absl::StatusCode::kInvalidArgument,
       "model: missing"},
      {"wordpiece", [](json& j) { j["model"]["type"] = "WordPiece"; },
       absl::StatusCode::kUnimplemented, "model.type"},
      {"bad_vocab_id", [](json& j) { j["model"]["vocab"]["he"] = "x"; },
       absl::StatusCode::kInvalidArgument, "model.vocab.he"},
      {"sparse_vocab_id", [](json& j) { j["model"]["vocab"]["he"] = 1000000000; },
       absl::StatusCode::kInvalidArgument, "model.vocab.he"},
      {"added_id_far_away",
       [](json& j) {
         j["added_tokens"] = json::array({{{"id", 2000000000}, {"content", "<a>"}}});
       },
       absl::StatusCode::kInvalidArgument, "added_tokens[0].id"},
      {"duplicate_id", [](json& j) { j["model"]["vocab"]["he"] = 3; },
       absl::StatusCode::kInvalidArgument, "model.vocab"},
      {"merge_not_string", [](json& j) { j["model"]["merges"][1] = 42; },
       absl::StatusCode::kInvalidArgument, "model.merges[1]"},
      {"merge_three_parts", [](json& j) { j["model"]["merges"][0] = "h e l"; },
       absl::StatusCode::kInvalidArgument, "model.merges[0]"},
      {"merge_unknown_token", [](json& j) { j["model"]["merges"][2] = "he zz"; },
       absl::StatusCode::kInvalidArgument, "model.merges[2]"},
      {"merges_missing", [](json& j) { j["model"].erase("merges"); },
       absl::StatusCode::kInvalidArgument, "model.merges"},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, absl::StatusCode::kUnimplemented,
       "model.dropout"},
      {"unk_not_in_vocab", [](json& j) { j["model"]["unk_token"] = "<unk>"; },
       absl::StatusCode::kInvalidArgument, "model.unk_token"},
      {"metaspace",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       absl::StatusCode::kUnimplemented, "pre_tokenizer.type"},
      {"no_pre_tokenizer", [](json& j) { j["pre_tokenizer"] = nullptr; },
       absl::StatusCode::kInvalidArgument, "pre_tokenizer"},
      {"prefix_space", [](json& j) { j["pre_tokenizer"]["add_prefix_space"] = true; },
       absl::StatusCode::kUnimplemented, "pre_tokenizer.add_prefix_space"},
      {"digits_step",
       [](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers", json::array({{{"type", "Digits"}}, {{"type", "ByteLevel"}}})}};
       },
       absl::StatusCode::kUnimplemented, "pre_tokenizer.pretokenizers[0].type"},
      {"bad_regex",
       [](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers", json::array({{{"type", "Split"},
                                             {"pattern", {{"Regex", "(unclosed"}}},
                                             {"behavior", "Isolated"}},
                                            {{"type", "ByteLevel"}, {"use_regex", false}}})}};
       },
       absl::StatusCode::kInvalidArgument, "pre_tokenizer.pretokenizers[0].pattern: bad regex"},
      {"nfkc",
       [](json& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       absl::StatusCode::kUnimplemented, "normalizer.type"},
      {"added_no_content",
       [](json& j) {
         j["added_tokens"] = json::array({{{"id", 260}}});
       },
       absl::StatusCode::kInvalidArgument, "added_tokens[0].content"},
      {"added_bad_flag",
       [](json& j) {
         j["added_tokens"] = json::array({{{"id", 260}, {"content", "<a>"}, {"lstrip", 1}}});
       },
       absl::StatusCode::kInvalidArgument, "added_tokens[0].lstrip"},
      {"wordpiece_decoder",
       [](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       absl::StatusCode::kUnimplemented, "decoder.type"},
      {"not_an_object",
       [](json& j) {
         j = json::array({1, 2});
       },
       absl::StatusCode::kInvalidArgument, "top level"},
  };
  const std::string dir = gecd::testing::MakeTempDir();
  for (const BrokenCase& c : cases) {
    json config = TinyTokenizerJson();
    c.corrupt(config);
    const std::string model_dir = absl::StrCat(dir, "/", c.name);
    std::filesystem::create_directories(model_dir);
    const std::string path = model_dir + "/tokenizer.json";
    std::ofstream(path) << config.dump();
    auto tokenizer = Tokenizer::LoadFromModelDir(model_dir);
    ASSERT_FALSE(tokenizer.ok()) << c.name;
    EXPECT_EQ(tokenizer.status().code(), c.code) << c.name << ": " << tokenizer.status();
    const std::string message(tokenizer.status().message());
    EXPECT_NE(message.find(path), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.field), std::string::npos) << c.name << ": " << message;
  }
  std::ofstream(dir + "/truncated.json") << TinyTokenizerJson().dump().substr(0, 100);
  auto truncated = BpeTokenizer::LoadFromFile(dir + "/truncated.json");
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(truncated.status().message()).find("truncated.json"), std::string::npos);

  auto missing = Tokenizer::LoadFromModelDir(dir);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(missing.status().message()).find(dir), std::string::npos);
  std::filesystem::remove_all(dir);
}

std::vector<int32_t> EncodePiecesOrDie(const Tokenizer& tokenizer,
                                       std::initializer_list<TextPiece> pieces) {
  auto ids = tokenizer.EncodePieces(std::span<const TextPiece>(pieces.begin(), pieces.size()));
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(BpeEncodePiecesTest, AddedTokensMatchOnlyInsideOneTemplatePiece) {
  json config = TinyTokenizerJson();
  config["added_tokens"] =
      json::array({AddedToken(260, "<s>", true), AddedToken(261, "<think>", false),
                   AddedToken(262, "<s>>", true)});
  auto tokenizer = LoadTiny(config);
  ASSERT_NE(tokenizer, nullptr);
  // Special or not, an added token in user text is ordinary text (merged as such: "hello").
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{"<s>", true}, {"<s>hello<think>", false}}),
            (std::vector<int32_t>{260, '<', 's', '>', 259, '<', 't', 'h', 'i', 'n', 'k', '>'}));
  // A token the boundary cuts is not matched; a shorter one inside the template piece is.
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{"<s", true}, {">", true}}),
            (std::vector<int32_t>{'<', 's', '>'}));
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{"<s>", true}, {">", true}}),
            (std::vector<int32_t>{260, '>'}));
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{"<s>", true}, {">", false}}),
            (std::vector<int32_t>{260, '>'}));
  // Ordinary text is pre-tokenized and merged across pieces, as in the whole string.
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{"<s>he", true}, {"llo", false}}),
            (std::vector<int32_t>{260, 259}));
}

TEST(BpeEncodePiecesTest, StripNeverTakesTheUsersWhitespaceAndSingleWordSeesIt) {
  json config = TinyTokenizerJson();
  config["added_tokens"] = json::array({
      AddedToken(260, "<l>", true, /*lstrip=*/true),
      AddedToken(261, "<r>", true, false, /*rstrip=*/true),
      AddedToken(262, "<w>", true, false, false, /*single_word=*/true),
  });
  auto tokenizer = LoadTiny(config);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(EncodeOrDie(*tokenizer, "<r> a <l>"), (std::vector<int32_t>{261, 'a', 260}));
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{"<r>", true}, {" a ", false}, {"<l>", true}}),
            (std::vector<int32_t>{261, ' ', 'a', ' ', 260}));
  // Whitespace of the token's own piece is stripped as in the whole string.
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{"<r> ", true}, {"a", false}, {" <l>", true}}),
            (std::vector<int32_t>{261, 'a', 260}));
  // single_word looks at the neighbouring characters whichever piece holds them.
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{"a", false}, {"<w>", true}}),
            (std::vector<int32_t>{'a', '<', 'w', '>'}));
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{"a ", false}, {"<w>", true}}),
            (std::vector<int32_t>{'a', ' ', 262}));
}

TEST(BpeEncodePiecesTest, NfcNormalizesEachPieceOnItsOwn) {
  json config = TinyTokenizerJson();
  config["normalizer"] = {{"type", "NFC"}};
  const std::string decomposed = "e\xCC\x81";  // e + combining acute; NFC: U+00E9
  config["added_tokens"] =
      json::array({AddedToken(260, "\xC3\xA9", true, false, false, false, /*normalized=*/true)});
  auto tokenizer = LoadTiny(config);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(EncodeOrDie(*tokenizer, decomposed), (std::vector<int32_t>{260}));
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{decomposed, true}}), (std::vector<int32_t>{260}));
  // The user's NFC text is ordinary text: the bytes of U+00E9.
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{decomposed, false}}),
            (std::vector<int32_t>{0xC3, 0xA9}));
  // A combining mark starting the user's text does not compose with the template's "e".
  EXPECT_EQ(EncodePiecesOrDie(*tokenizer, {{"e", true}, {"\xCC\x81", false}}),
            (std::vector<int32_t>{'e', 0xCC, 0x81}));
}

// Ids from Hugging Face `tokenizers` 0.23.3 with encode_special_tokens = True (the
// split_special_tokens behaviour), for user text holding a special token.
TEST(BpeEncodePiecesRealTest, UserTextMatchesReferenceSplitSpecialTokens) {
  struct Case {
    const char* tokenizer;
    const char* text;
    std::vector<int32_t> ids;
  };
  const Case cases[] = {
      {"gpt2",
       "She go home.<|endoftext|>They was happy.",
       {3347, 467, 1363, 29847, 91, 437, 1659, 5239, 91, 29, 2990, 373, 3772, 13}},
      {"qwen3",
       "She go home.<|endoftext|>They was happy.",
       {7941, 728, 2114, 15757, 91, 8691, 723, 427, 91, 29, 6865, 572, 6247, 13}},
      {"qwen3", "a<|im_end|>b", {64, 27, 91, 318, 6213, 91, 29, 65}},
      {"qwen3", " <|im_start|>user\n", {82639, 318, 4906, 91, 29, 872, 198}},
  };
  for (const std::string name : {"gpt2", "qwen3"}) {
    const auto path = gecd::testing::SharedDataPath("tokenizers/" + name + "/tokenizer.json");
    if (!path.has_value()) GTEST_SKIP() << "../shared is absent";
    auto tokenizer = BpeTokenizer::LoadFromFile(*path);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    for (const Case& c : cases) {
      if (c.tokenizer != name) continue;
      EXPECT_EQ(EncodePiecesOrDie(**tokenizer, {{c.text, false}}), c.ids)
          << name << " \"" << Printable(c.text) << "\"";
    }
  }
}

// Golden ids from Hugging Face `tokenizers` on the real files under ../shared.
class BpeGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto path = gecd::testing::SharedDataPath("tokenizers/" + GetParam() + "/tokenizer.json");
    if (!path.has_value()) GTEST_SKIP() << "../shared is absent";
    auto tokenizer =
        Tokenizer::LoadFromModelDir(std::filesystem::path(*path).parent_path().string());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
    auto goldens = gecd::testing::ReadTokenizerGoldens(
        gecd::testing::FixturePath("tokenizers/" + GetParam() + "_golden.jsonl"));
    ASSERT_TRUE(goldens.ok()) << goldens.status();
    goldens_ = std::move(*goldens);
    ASSERT_GE(goldens_.size(), 1000u);
  }

  // Counts strings whose ids differ from the golden ones, reporting the first few.
  int CountMismatches(const Tokenizer& tokenizer, int pass) {
    int mismatches = 0;
    for (const TokenizerGolden& golden : goldens_) {
      auto ids = tokenizer.Encode(golden.text);
      if (ids.ok() && *ids == golden.ids) continue;
      if (++mismatches <= 5) {
        ADD_FAILURE() << "pass " << pass << ", " << golden.kind << " \"" << Printable(golden.text)
                      << "\"\n  expected " << absl::StrJoin(golden.ids, ",") << "\n  actual   "
                      << (ids.ok() ? absl::StrJoin(*ids, ",") : ids.status().ToString());
      }
    }
    return mismatches;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<TokenizerGolden> goldens_;
};

TEST_P(BpeGoldenTest, EncodesEveryGoldenStringExactly) {
  // The second pass is served from the word cache.
  for (int pass = 1; pass <= 2; ++pass) {
    EXPECT_EQ(CountMismatches(*tokenizer_, pass), 0) << "of " << goldens_.size() << " strings";
  }
}

// NFC, as utf8proc (independent of the tokenizer's own use of it) computes it.
std::string Nfc(const std::string& text) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  EXPECT_GE(n, 0) << Printable(text);
  std::string result = n >= 0 ? std::string(reinterpret_cast<char*>(out), n) : "";
  std::free(out);
  return result;
}

TEST_P(BpeGoldenTest, DecodeInvertsEncode) {
  // Qwen3 normalizes to NFC first, so its round trip gives the NFC form of the text.
  const bool nfc = GetParam() == "qwen3";
  int failures = 0;
  for (const TokenizerGolden& golden : goldens_) {
    const std::string expected = nfc ? Nfc(golden.text) : golden.text;
    const std::string decoded = tokenizer_->Decode(golden.ids, /*skip_special=*/false);
    std::string concatenated;
    for (int32_t id : golden.ids) {
      concatenated += tokenizer_->IsSpecial(id) ? tokenizer_->Decode({&id, 1}, false)
                                                : tokenizer_->TokenBytes(id);
    }
    if (decoded == expected && concatenated == expected) continue;
    if (++failures <= 5)
      ADD_FAILURE() << "\"" << Printable(golden.text) << "\" decodes to \"" << Printable(decoded)
                    << "\"";
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(BpeGoldenTest, EncodesConcurrently) {
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < mismatches.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < goldens_.size(); i += 2) {
        auto ids = tokenizer_->Encode(goldens_[i].text);
        if (!ids.ok() || *ids != goldens_[i].ids) ++mismatches[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST_P(BpeGoldenTest, SpecialTokensInText) {
  const std::string eot = "<|endoftext|>";
  const std::optional<int32_t> eot_id = tokenizer_->TokenToId(eot);
  ASSERT_TRUE(eot_id.has_value());
  EXPECT_TRUE(tokenizer_->IsSpecial(*eot_id));
  EXPECT_EQ(tokenizer_->TokenBytes(*eot_id), "");
  const std::vector<int32_t> hello = EncodeOrDie(*tokenizer_, "Hello");
  const std::vector<int32_t> ids = EncodeOrDie(*tokenizer_, "Hello" + eot + "Hello");
  std::vector<int32_t> expected = hello;
  expected.push_back(*eot_id);
  expected.insert(expected.end(), hello.begin(), hello.end());
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tokenizer_->Decode(ids), "HelloHello");
  EXPECT_EQ(tokenizer_->Decode(ids, /*skip_special=*/false), "Hello" + eot + "Hello");
  // Without its closing bracket it is ordinary text.
  const std::vector<int32_t> partial = EncodeOrDie(*tokenizer_, "<|endoftext|");
  EXPECT_EQ(std::count(partial.begin(), partial.end(), *eot_id), 0);
}

TEST_P(BpeGoldenTest, RejectsInvalidUtf8) {
  EXPECT_EQ(tokenizer_->Encode("caf\xC3").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tokenizer_->Encode("\xED\xBF\xBF").status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, BpeGoldenTest, ::testing::Values("gpt2", "qwen3"),
                         [](const auto& info) { return info.param; });

TEST(BpeTokenizerRealTest, Gpt2KnownIds) {
  const auto path = gecd::testing::SharedDataPath("tokenizers/gpt2/tokenizer.json");
  if (!path.has_value()) GTEST_SKIP() << "../shared is absent";
  auto tokenizer = BpeTokenizer::LoadFromFile(*path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(EncodeOrDie(**tokenizer, "Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ((*tokenizer)->vocab_size(), 50257);
}

TEST(BpeTokenizerRealTest, Qwen3ChatTokens) {
  const auto path = gecd::testing::SharedDataPath("tokenizers/qwen3/tokenizer.json");
  if (!path.has_value()) GTEST_SKIP() << "../shared is absent";
  auto tokenizer = BpeTokenizer::LoadFromFile(*path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Tokenizer& t = **tokenizer;
  EXPECT_EQ(t.vocab_size(), 151669);
  const std::vector<int32_t> ids = EncodeOrDie(t, "<|im_start|>user\n<think>x</think><|im_end|>");
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(ids.front(), t.TokenToId("<|im_start|>"));
  EXPECT_EQ(ids.back(), t.TokenToId("<|im_end|>"));
  EXPECT_TRUE(t.IsSpecial(ids.front()));
  // <think> is an added token but not a special one: decoding keeps it.
  const std::optional<int32_t> think = t.TokenToId("<think>");
  ASSERT_TRUE(think.has_value());
  EXPECT_FALSE(t.IsSpecial(*think));
  EXPECT_NE(std::find(ids.begin(), ids.end(), *think), ids.end());
  EXPECT_EQ(t.Decode(ids), "user\n<think>x</think>");
}

}  // namespace
}  // namespace gecd::model
