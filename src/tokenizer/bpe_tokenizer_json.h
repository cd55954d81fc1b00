#ifndef GECD_TOKENIZER_BPE_TOKENIZER_JSON_H_
#define GECD_TOKENIZER_BPE_TOKENIZER_JSON_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/json_fields.h"
#include "tokenizer/pcre_regex.h"

// A Hugging Face tokenizer.json for byte-level BPE, read and checked: what BpeTokenizer
// (tokenizer/bpe_tokenizer.h, which says what is supported) runs on. Everything the file may hold
// that the runtime does not implement is refused here, naming the file and field.
namespace gecd::model {

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return absl::Hash<std::string_view>{}(s); }
};
struct StringViewEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};
// Keyed by std::string, looked up by std::string_view without a copy.
template <typename V>
using StringMap = absl::flat_hash_map<std::string, V, StringViewHash, StringViewEq>;

// One Split pre-tokenizer step (ByteLevel's own regex is one too).
struct SplitStep {
  std::unique_ptr<Regex> regex;
  bool keep_matches = true;  // Isolated keeps them as pieces; Removed drops them.
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = true;
};

// Finds added tokens leftmost-longest, the semantics of the aho-corasick automaton the
// `tokenizers` library builds. Models carry tens to hundreds of added tokens, which nearly all
// start with '<', so bucketing by first byte is as fast as an automaton here.
class AddedTokenMatcher {
 public:
  struct Match {
    size_t pos;
    size_t len;
    const AddedToken* token;
  };

  void Add(std::string pattern, const AddedToken* token) {
    if (pattern.empty()) return;
    auto& bucket = buckets_[static_cast<unsigned char>(pattern[0])];
    bucket.emplace_back(std::move(pattern), token);
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    empty_ = false;
  }

  // The leftmost-longest match starting in [from, text.size()).
  std::optional<Match> Find(std::string_view text, size_t from) const {
    if (empty_) return std::nullopt;
    for (size_t pos = from; pos < text.size(); ++pos) {
      for (const auto& [pattern, token] : buckets_[static_cast<unsigned char>(text[pos])]) {
        if (text.compare(pos, pattern.size(), pattern) == 0) {
          return Match{pos, pattern.size(), token};
        }
      }
    }
    return std::nullopt;
  }

 private:
  std::array<std::vector<std::pair<std::string, const AddedToken*>>, 256> buckets_;
  bool empty_ = true;
};

struct Merge {
  uint32_t rank;
  int32_t new_id;
};

inline uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Everything the runtime reads, immutable once parsed.
struct BpeTokenizerJson {
  // `json_text` is the file's contents; `source` names it in errors.
  static absl::StatusOr<std::unique_ptr<BpeTokenizerJson>> Parse(std::string_view json_text,
                                                                 const std::string& source);

  bool nfc = false;
  std::vector<SplitStep> splits;

  StringMap<int32_t> vocab;  // byte-level spelling -> id
  absl::flat_hash_map<uint64_t, Merge> merges;
  std::array<int32_t, 256> byte_ids;  // -1 where the vocabulary lacks a byte
  bool ignore_merges = false;
  int32_t unk_id = -1;
  bool fuse_unk = false;

  std::vector<AddedToken> added;  // never resized after the matchers point into it
  StringMap<int32_t> added_by_content;
  AddedTokenMatcher raw_matcher;         // normalized: false, matched in the input
  AddedTokenMatcher normalized_matcher;  // normalized: true, matched after normalization

  std::vector<std::string> id_bytes;  // raw bytes of every id; "" for holes
  std::vector<uint8_t> id_special;    // 1 where the id is a special added token

 private:
  BpeTokenizerJson() = default;
  absl::Status ParseNormalizer(const JsonObject& root);
  absl::Status ParsePreTokenizer(const JsonObject& root);
  absl::Status ParseSplit(const JsonObject& split);
  absl::Status ParseByteLevel(const JsonObject& byte_level);
  absl::Status ParseModel(const JsonObject& root);
  absl::Status ParseAddedTokens(const JsonObject& root);
  absl::Status ParseDecoder(const JsonObject& root);
};

}  // namespace gecd::model

#endif  // GECD_TOKENIZER_BPE_TOKENIZER_JSON_H_
