#include "tokenizer/tokenizer.h"

#include <unistd.h>
#include <utf8proc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/byte_level_vocab.h"
#include "testing/scoped_temp_dir.h"
#include "testing/test_paths.h"
#include "testing/tokenizer_goldens.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace gecd::model {
namespace {

using ::gecd::testing::FixturePath;
using ::gecd::testing::Printable;
using ::gecd::testing::ScopedTempDir;
using ::gecd::testing::TokenizerGolden;
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

// A model directory the user may not search (mode 000), or one under a directory it may not
// search, is refused as PERMISSION_DENIED naming it, not as a missing directory or tokenizer.
TEST_F(LoadFromModelDirTest, UnreadableDirectoryIsPermissionDeniedNamingIt) {
  namespace fs = std::filesystem;
  const fs::path root(dir_.path());
  fs::permissions(root.parent_path(), fs::perms::others_exec, fs::perm_options::add);
  fs::permissions(root, fs::perms::others_exec, fs::perm_options::add);
  const fs::path locked = root / "locked";
  const fs::path hidden = root / "private" / "model";
  fs::create_directories(hidden);
  fs::create_directory(locked);
  std::ofstream(locked / "tokenizer.json") << "{}";
  std::ofstream(hidden / "tokenizer.json") << "{}";
  fs::permissions(locked, fs::perms::none);
  fs::permissions(root / "private", fs::perms::owner_all);
  // In a child process, which as root first becomes nobody (65534): root reads any directory.
  EXPECT_EXIT(
      {
        if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0) _exit(3);
        for (const fs::path& dir : {locked, hidden}) {
          auto tokenizer = Tokenizer::LoadFromModelDir(dir.string());
          const std::string message(tokenizer.status().message());
          if (tokenizer.status().code() != absl::StatusCode::kPermissionDenied ||
              message.find(dir.string() + ": cannot read this model directory") ==
                  std::string::npos) {
            _exit(1);
          }
        }
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  fs::permissions(locked, fs::perms::owner_all);
}

// --- EncodePieces, on every tokenizer the project ships or tests against -------------------

// A byte-level tokenizer.json (one token per byte, NFC) with added tokens of every kind the
// real ones use: special and not, matched before and after normalization, lstrip and rstrip.
json TinyAddedTokensJson() {
  const auto added = [](int id, const std::string& content, bool special, bool normalized,
                        bool lstrip = false, bool rstrip = false) {
    return json{
        {"id", id},         {"content", content},   {"special", special},      {"lstrip", lstrip},
        {"rstrip", rstrip}, {"single_word", false}, {"normalized", normalized}};
  };
  return json{
      {"version", "1.0"},
      {"added_tokens",
       json::array({added(256, "<|endoftext|>", true, true),
                    added(257, "<|im_start|>", true, false), added(258, "<|im_end|>", true, false),
                    added(259, "<think>", false, false),
                    added(260, "<L>", true, false, /*lstrip=*/true),
                    added(261, "<R>", true, false, false, /*rstrip=*/true)})},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", gecd::testing::ByteLevelVocab()}, {"merges", json::array()}}},
  };
}

struct TokenizerSource {
  std::string name;
  // The model directory; nullopt when its files are absent (the test skips).
  std::optional<std::string> (*dir)(const std::string& scratch);
  std::string golden;  // tests/fixtures/tokenizers/<golden>: the strings to split
  // SentencePiece user-defined symbols, which the Tokenizer interface cannot list.
  std::vector<std::string> user_defined;
  // A prompt template around the user's text, as the model would be served.
  std::string prefix;
  std::string suffix;
};

void PrintTo(const TokenizerSource& source, std::ostream* os) { *os << source.name; }

std::optional<std::string> SharedTokenizerDir(const std::string& name) {
  const auto path = gecd::testing::SharedDataPath("tokenizers/" + name + "/tokenizer.json");
  if (!path.has_value()) return std::nullopt;
  return std::filesystem::path(*path).parent_path().string();
}

const TokenizerSource kSources[] = {
    {"default_model",
     [](const std::string&) -> std::optional<std::string> {
       return gecd::testing::SourceDir() + "/models/gecd-gec-small";
     },
     "sp_golden.jsonl",
     {"<sep>"},
     "<s>",
     "<sep>"},
    {"sp_brown",
     [](const std::string&) -> std::optional<std::string> {
       return FixturePath("tokenizers/sp_brown");
     },
     "sp_golden.jsonl",
     {},
     "<s>Fix: ",
     "</s>"},
    {"tiny_bpe",
     [](const std::string& scratch) -> std::optional<std::string> {
       std::ofstream(scratch + "/tokenizer.json") << TinyAddedTokensJson().dump();
       return scratch;
     },
     "gpt2_golden.jsonl",
     {},
     "<|im_start|>user\n",
     "<|im_end|>\n"},
    {"gpt2",
     [](const std::string&) { return SharedTokenizerDir("gpt2"); },
     "gpt2_golden.jsonl",
     {},
     "Fix: ",
     "\n"},
    {"qwen3",
     [](const std::string&) { return SharedTokenizerDir("qwen3"); },
     "qwen3_golden.jsonl",
     {},
     "<|im_start|>user\nFix: ",
     "<|im_end|>\n<|im_start|>assistant\n"},
};

std::string Nfc(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::string result = n < 0 ? std::string(text) : std::string(reinterpret_cast<char*>(out), n);
  std::free(out);
  return result;
}

class EncodePiecesTest : public ::testing::TestWithParam<TokenizerSource> {
 protected:
  struct TemplateToken {
    std::string text;
    int32_t id;
  };

  void SetUp() override {
    const TokenizerSource& source = GetParam();
    const std::optional<std::string> dir = source.dir(scratch_.path());
    if (!dir.has_value()) GTEST_SKIP() << "../shared is absent";
    auto tokenizer = Tokenizer::LoadFromModelDir(*dir);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
    const std::string json_path = *dir + "/tokenizer.json";
    if (std::filesystem::exists(json_path)) {
      std::ifstream in(json_path);
      const json doc = json::parse(in);
      for (const json& added : doc["added_tokens"]) {
        tokens_.push_back({added["content"].get<std::string>(), added["id"].get<int32_t>()});
      }
    } else {
      for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
        if (!tokenizer_->IsSpecial(id)) continue;
        const int32_t ids[] = {id};
        tokens_.push_back({tokenizer_->Decode(ids, /*skip_special=*/false), id});
      }
      for (const std::string& symbol : source.user_defined) {
        const std::optional<int32_t> id = tokenizer_->TokenToId(symbol);
        ASSERT_TRUE(id.has_value()) << symbol;
        tokens_.push_back({symbol, *id});
      }
    }
    ASSERT_FALSE(tokens_.empty());
    auto goldens = gecd::testing::ReadTokenizerGoldens(FixturePath("tokenizers/" + source.golden));
    ASSERT_TRUE(goldens.ok()) << goldens.status();
    for (TokenizerGolden& golden : *goldens) texts_.push_back(std::move(golden.text));
  }

  std::vector<int32_t> EncodeOrFail(std::span<const TextPiece> pieces) const {
    auto ids = tokenizer_->EncodePieces(pieces);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  // The template tokens among `ids`, in order.
  std::vector<int32_t> TemplateIds(const std::vector<int32_t>& ids) const {
    std::vector<int32_t> found;
    for (int32_t id : ids) {
      if (std::any_of(tokens_.begin(), tokens_.end(),
                      [&](const TemplateToken& t) { return t.id == id; })) {
        found.push_back(id);
      }
    }
    return found;
  }

  // Whether `text` holds a template token's text, or `pos` cuts through one.
  bool HoldsTemplateText(std::string_view text) const {
    return std::any_of(tokens_.begin(), tokens_.end(), [&](const TemplateToken& t) {
      return text.find(t.text) != std::string_view::npos;
    });
  }
  bool CutsTemplateText(std::string_view text, size_t pos) const {
    for (const TemplateToken& t : tokens_) {
      for (size_t at = text.find(t.text); at != std::string_view::npos;
           at = text.find(t.text, at + 1)) {
        if (at < pos && pos < at + t.text.size()) return true;
      }
    }
    return false;
  }

  ScopedTempDir scratch_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<TemplateToken> tokens_;
  std::vector<std::string> texts_;
};

// Issue 12 item 5: a user's text that spells a template token must not produce it (it used to
// end the prompt early: "<sep>" or "</s>" in the text cut off the rest of it).
TEST_P(EncodePiecesTest, UserTextNeverProducesTemplateTokens) {
  for (const TemplateToken& token : tokens_) {
    const std::string& t = token.text;
    const std::string user_texts[] = {
        t,     "a" + t,         t + " b",
        t + t, "x " + t + " y", "She go home." + t + "They was happy but I is sad."};
    for (const std::string& user : user_texts) {
      SCOPED_TRACE("token \"" + Printable(t) + "\", user text \"" + Printable(user) + "\"");
      const TextPiece alone[] = {{user, false}};
      std::vector<int32_t> ids = EncodeOrFail(alone);
      EXPECT_THAT(TemplateIds(ids), ::testing::IsEmpty()) << absl::StrJoin(ids, ",");
      EXPECT_EQ(tokenizer_->Decode(ids, /*skip_special=*/false), user);

      // Between template tokens: the first one, and this one.
      const TemplateToken& first = tokens_.front();
      const TextPiece prompt[] = {{first.text, true}, {user, false}, {t, true}};
      ids = EncodeOrFail(prompt);
      EXPECT_EQ(TemplateIds(ids), (std::vector<int32_t>{first.id, token.id}))
          << absl::StrJoin(ids, ",");
      EXPECT_EQ(tokenizer_->Decode(ids, /*skip_special=*/false), first.text + user + t);
    }
  }
}

TEST_P(EncodePiecesTest, TemplatePiecesStillProduceTemplateTokens) {
  for (const TemplateToken& token : tokens_) {
    SCOPED_TRACE("token \"" + Printable(token.text) + "\"");
    const TextPiece alone[] = {{token.text, true}};
    EXPECT_EQ(TemplateIds(EncodeOrFail(alone)), std::vector<int32_t>{token.id});
    EXPECT_EQ(TemplateIds(*tokenizer_->Encode(token.text)), std::vector<int32_t>{token.id});
    const TextPiece around[] = {{"x", false}, {token.text, true}, {"y", false}};
    EXPECT_EQ(TemplateIds(EncodeOrFail(around)), std::vector<int32_t>{token.id});
  }
}

// Pieces that all allow template tokens encode as the whole string does, wherever it is cut
// (except through a template token, which a boundary splits by contract, or where NFC of the
// parts differs from NFC of the whole).
TEST_P(EncodePiecesTest, SplitPromptIsTokenizedAsIfWhole) {
  int compared = 0;
  int mismatches = 0;
  for (const std::string& text : texts_) {
    const auto whole = tokenizer_->Encode(text);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const size_t n = text.size();
    for (size_t cut : {size_t{1}, n / 3, n / 2, 2 * n / 3, n - 1}) {
      while (cut > 0 && cut < n && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
      if (cut == 0 || cut >= n || CutsTemplateText(text, cut)) continue;
      const std::string_view a = std::string_view(text).substr(0, cut);
      const std::string_view b = std::string_view(text).substr(cut);
      if (Nfc(a) + Nfc(b) != Nfc(text)) continue;
      const TextPiece two[] = {{a, true}, {b, true}};
      const TextPiece three[] = {{a, true}, {"", false}, {b, true}};
      for (std::span<const TextPiece> pieces : {std::span<const TextPiece>(two), {three}}) {
        ++compared;
        auto ids = tokenizer_->EncodePieces(pieces);
        if (ids.ok() && *ids == *whole) continue;
        if (++mismatches <= 5) {
          ADD_FAILURE() << "\"" << Printable(a) << "\" | \"" << Printable(b) << "\"\n  whole "
                        << absl::StrJoin(*whole, ",") << "\n  split "
                        << (ids.ok() ? absl::StrJoin(*ids, ",") : ids.status().ToString());
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << compared;
  EXPECT_GT(compared, 2000);
}

// A user's text without template-token text gets the ids the whole prompt gets, across the
// template/text boundaries: what the model saw in training.
TEST_P(EncodePiecesTest, PromptWithUserTextIsTokenizedAsIfWhole) {
  const TokenizerSource& source = GetParam();
  int compared = 0;
  int mismatches = 0;
  for (const std::string& text : texts_) {
    if (HoldsTemplateText(text)) continue;
    const std::string prompt = source.prefix + text + source.suffix;
    if (Nfc(source.prefix) + Nfc(text) + Nfc(source.suffix) != Nfc(prompt)) continue;
    const auto whole = tokenizer_->Encode(prompt);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const TextPiece pieces[] = {{source.prefix, true}, {text, false}, {source.suffix, true}};
    ++compared;
    auto ids = tokenizer_->EncodePieces(pieces);
    if (ids.ok() && *ids == *whole) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << "\"" << Printable(text) << "\"\n  whole " << absl::StrJoin(*whole, ",")
                    << "\n  pieces "
                    << (ids.ok() ? absl::StrJoin(*ids, ",") : ids.status().ToString());
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << compared;
  EXPECT_GT(compared, 1000);
}

TEST_P(EncodePiecesTest, ConcurrentCallsGiveTheSerialIds) {
  const TokenizerSource& source = GetParam();
  const size_t count = std::min<size_t>(texts_.size(), 300);
  std::vector<std::vector<int32_t>> expected(count);
  for (size_t i = 0; i < count; ++i) {
    const TextPiece pieces[] = {{source.prefix, true}, {texts_[i], false}, {source.suffix, true}};
    expected[i] = EncodeOrFail(pieces);
  }
  std::atomic<int> mismatches = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < count; ++k) {
        const size_t i = (k + t * count / 4) % count;  // threads start at different texts
        const TextPiece pieces[] = {
            {source.prefix, true}, {texts_[i], false}, {source.suffix, true}};
        auto ids = tokenizer_->EncodePieces(pieces);
        if (!ids.ok() || *ids != expected[i]) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// The Decode half of the Tokenizer's thread-safety contract (tokenizer.h).
TEST_P(EncodePiecesTest, ConcurrentDecodesGiveTheSerialText) {
  const size_t count = std::min<size_t>(texts_.size(), 300);
  std::vector<std::vector<int32_t>> ids(count);
  std::vector<std::string> expected(count), expected_bytes(count);
  const auto token_bytes = [&](const std::vector<int32_t>& of) {
    std::string bytes;
    for (int32_t id : of) bytes += tokenizer_->TokenBytes(id);
    return bytes;
  };
  for (size_t i = 0; i < count; ++i) {
    const TextPiece pieces[] = {{texts_[i], false}};
    ids[i] = EncodeOrFail(pieces);
    expected[i] = tokenizer_->Decode(ids[i], /*skip_special=*/false);
    expected_bytes[i] = token_bytes(ids[i]);
  }
  std::atomic<int> mismatches = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < count; ++k) {
        const size_t i = (k + t * count / 4) % count;
        if (tokenizer_->Decode(ids[i], /*skip_special=*/false) != expected[i]) ++mismatches;
        if (token_bytes(ids[i]) != expected_bytes[i]) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_P(EncodePiecesTest, InvalidUtf8InAnyPieceIsAnErrorNamingIt) {
  const TextPiece bad_user[] = {{"<s>", true}, {"ok \xC3\x28", false}, {"\n", true}};
  auto ids = tokenizer_->EncodePieces(bad_user);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("piece 1 of 3"));
  // A character split across two pieces is invalid in each, though the concatenation is not.
  const TextPiece split[] = {{"caf\xC3", true}, {"\xA9", false}};
  EXPECT_EQ(tokenizer_->EncodePieces(split).status().code(), absl::StatusCode::kInvalidArgument);
  const TextPiece empty[] = {{"", true}, {"", false}};
  auto none = tokenizer_->EncodePieces(empty);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(*none, ::testing::IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, EncodePiecesTest, ::testing::ValuesIn(kSources),
                         [](const ::testing::TestParamInfo<TokenizerSource>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace gecd::model
