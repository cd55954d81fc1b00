#include "model/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "model/joined_pieces.h"
#include "model/json_fields.h"
#include "model/utf8.h"
#include "nlohmann/json.hpp"

namespace gecd::model {

namespace {

using nlohmann::json;

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

// The regex ByteLevel{use_regex: true} splits with (GPT-2's).
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves and the others move to
// U+0100 upwards, so every byte is spelled by one visible, non-space character.
const std::array<char32_t, 256>& ByteToCodepoint() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes the code point at text[*i] (text is valid UTF-8) and advances *i past it.
char32_t NextCodepoint(std::string_view text, size_t* i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[*i + k]); };
  const size_t n = Utf8SequenceLength(byte(0));
  char32_t cp = n == 1 ? byte(0) : byte(0) & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (byte(k) & 0x3F);
  *i += n;
  return cp;
}

std::string ByteLevelSpelling(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) AppendUtf8(ByteToCodepoint()[b], &out);
  return out;
}

// The raw bytes a vocabulary entry stands for. Like the ByteLevel decoder, an entry with a
// character outside the byte alphabet stands for its own UTF-8.
std::string ByteLevelBytes(std::string_view token) {
  static const absl::flat_hash_map<char32_t, unsigned char> to_byte = [] {
    absl::flat_hash_map<char32_t, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[ByteToCodepoint()[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    auto it = to_byte.find(NextCodepoint(token, &i));
    if (it == to_byte.end()) return std::string(token);
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

// Rust's char::is_whitespace (the Unicode White_Space property), used by lstrip/rstrip.
bool IsWhiteSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust regex's Unicode \w (letters, marks, decimal and letter numbers, connector punctuation,
// joiners), used by single_word.
bool IsWordChar(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

size_t LastCodepointStart(std::string_view text) {
  size_t i = text.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

bool IsAscii(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

absl::StatusOr<std::string> Nfc(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NFC normalization failed: ", utf8proc_errmsg(n)));
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

// A compiled, JIT-compiled PCRE2 pattern (UTF + UCP, as Oniguruma's Unicode classes behave).
// Immutable; matching uses per-thread match data, so one Regex serves all threads.
class Regex {
 public:
  // `label` names the pattern's source in errors.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern,
                                                        const std::string& label) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (code == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": bad regex at offset ", offset, ": ", ErrorMessage(error)));
    }
    const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return std::unique_ptr<Regex>(new Regex(code, jit));
  }

  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) -> absl::Status for each non-empty match in `text`, left to
  // right. After an empty match the search resumes one character later, as Oniguruma's does.
  template <typename F>
  absl::Status ForEachMatch(std::string_view text, F&& on_match) const {
    pcre2_match_data* md = ThreadMatchData();
    if (md == nullptr) return absl::ResourceExhaustedError("cannot allocate regex match data");
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0;
    while (start < text.size()) {
      int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), start, 0, md, nullptr)
                    : PCRE2_ERROR_JIT_STACKLIMIT;
      // The interpreter keeps its backtracking state on the heap, so it copes with inputs that
      // overflow the JIT's fixed stack.
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) return absl::InternalError(absl::StrCat("regex match: ", ErrorMessage(rc)));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
      const size_t begin = ovector[0];
      const size_t end = ovector[1];
      if (end > begin) {
        RETURN_IF_ERROR(on_match(begin, end));
        start = end;
      } else if (begin < text.size()) {
        start = begin + Utf8SequenceLength(static_cast<unsigned char>(text[begin]));
      } else {
        break;
      }
    }
    return absl::OkStatus();
  }

 private:
  Regex(pcre2_code* code, bool jit) : code_(code), jit_(jit) {}

  static std::string ErrorMessage(int error) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error, buffer, sizeof(buffer));
    return reinterpret_cast<const char*>(buffer);
  }

  // Only the whole-match offsets are read, so one pair suffices for every pattern.
  static pcre2_match_data* ThreadMatchData() {
    struct Holder {
      pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
      ~Holder() { pcre2_match_data_free(data); }
    };
    thread_local Holder holder;
    return holder.data;
  }

  pcre2_code* code_;
  bool jit_;
};

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

// Cuts joined.text()'s [begin, end) at the added tokens `matcher` finds, like
// AddedVocabulary::find_matches on that window alone, except that a token is only taken inside
// one piece that allows it, and lstrip/rstrip strip only whitespace of that piece: calls
// on_text(from, to) -> absl::Status for the text between tokens and on_token(id) for each.
template <typename OnText, typename OnToken>
absl::Status SplitOnAddedTokens(const AddedTokenMatcher& matcher, const JoinedPieces& joined,
                                size_t begin, size_t end, OnText&& on_text, OnToken&& on_token) {
  const std::string_view text = joined.text().substr(0, end);
  const std::vector<JoinedPieces::Piece>& pieces = joined.pieces();
  size_t done = begin;  // end of the last token taken, including stripped whitespace
  size_t search = begin;
  size_t piece = 0;
  while (piece < pieces.size() && pieces[piece].begin < end) {
    const JoinedPieces::Piece& p = pieces[piece];
    const size_t zone_begin = std::max(p.begin, begin);
    const size_t zone_end = std::min(p.end, end);
    const std::optional<AddedTokenMatcher::Match> match =
        p.special_tokens_allowed && std::max(search, zone_begin) < zone_end
            ? matcher.Find(text.substr(0, zone_end), std::max(search, zone_begin))
            : std::nullopt;
    if (!match.has_value()) {
      ++piece;
      continue;
    }
    size_t start = match->pos;
    size_t stop = match->pos + match->len;
    search = stop;
    const AddedToken& token = *match->token;
    if (token.single_word) {
      bool word_before = false;
      if (start > begin) {
        size_t i = LastCodepointStart(text.substr(0, start));
        word_before = IsWordChar(NextCodepoint(text, &i));
      }
      bool word_after = false;
      if (stop < end) {
        size_t i = stop;
        word_after = IsWordChar(NextCodepoint(text, &i));
      }
      if (word_before || word_after) continue;
    }
    // Only whitespace-led tokens can start inside whitespace an rstrip already took.
    if (start < done) continue;
    if (token.lstrip) {
      while (start > std::max(done, zone_begin)) {
        size_t i = LastCodepointStart(text.substr(0, start));
        const size_t prev = i;
        if (!IsWhiteSpace(NextCodepoint(text, &i))) break;
        start = prev;
      }
    }
    if (token.rstrip) {
      while (stop < zone_end) {
        size_t i = stop;
        if (!IsWhiteSpace(NextCodepoint(text, &i))) break;
        stop = i;
      }
    }
    if (done < start) RETURN_IF_ERROR(on_text(done, start));
    on_token(token.id);
    done = stop;
  }
  if (done < end) RETURN_IF_ERROR(on_text(done, end));
  return absl::OkStatus();
}

// Word -> ids memo. Sharded so concurrent encoders rarely contend; a full shard is simply
// cleared, which bounds memory without bookkeeping.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 128;

  bool Lookup(std::string_view word, std::vector<int32_t>* out) {
    Shard& shard = ShardFor(word);
    absl::MutexLock lock(&shard.mu);
    auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    out->insert(out->end(), it->second.begin(), it->second.end());
    return true;
  }

  void Insert(std::string_view word, std::span<const int32_t> ids) {
    Shard& shard = ShardFor(word);
    absl::MutexLock lock(&shard.mu);
    if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
    shard.map.try_emplace(word, ids.begin(), ids.end());
  }

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 8192;
  struct Shard {
    absl::Mutex mu;
    StringMap<std::vector<int32_t>> map ABSL_GUARDED_BY(mu);
  };
  Shard& ShardFor(std::string_view word) {
    return shards_[absl::Hash<std::string_view>{}(word) % kShards];
  }
  std::array<Shard, kShards> shards_;
};

struct Merge {
  uint32_t rank;
  int32_t new_id;
};

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// The label of an array element, e.g. "model.merges[3]".
std::string Indexed(std::string_view label, size_t i) {
  return absl::StrCat(std::string(label), "[", i, "]");
}

}  // namespace

struct BpeTokenizer::Rep {
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
  std::vector<uint8_t> id_special;

  mutable WordCache cache;

  absl::Status ParseNormalizer(const JsonObject& root);
  absl::Status ParsePreTokenizer(const JsonObject& root);
  absl::Status ParseSplit(const JsonObject& split);
  absl::Status ParseByteLevel(const JsonObject& byte_level);
  absl::Status ParseModel(const JsonObject& root);
  absl::Status ParseAddedTokens(const JsonObject& root);
  absl::Status ParseDecoder(const JsonObject& root);

  template <typename Emit>
  absl::Status PreTokenize(size_t step, std::string_view piece, Emit& emit) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;
  void Bpe(std::string_view word, std::vector<int32_t>* ids) const;
};

absl::Status BpeTokenizer::Rep::ParseNormalizer(const JsonObject& root) {
  const json* value = root.Find("normalizer");
  if (value == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(JsonObject normalizer, JsonObject::Of(*value, root.path(), "normalizer"));
  ASSIGN_OR_RETURN(std::string type, normalizer.String("type"));
  std::vector<JsonObject> parts;
  if (type == "Sequence") {
    const json* list = normalizer.Find("normalizers");
    if (list == nullptr || !list->is_array()) {
      return normalizer.Error("normalizers", "expected an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      ASSIGN_OR_RETURN(
          JsonObject part,
          JsonObject::Of((*list)[i], root.path(), Indexed(normalizer.Label("normalizers"), i)));
      parts.push_back(part);
    }
  } else {
    parts.push_back(normalizer);
  }
  for (const JsonObject& part : parts) {
    ASSIGN_OR_RETURN(std::string part_type, part.String("type"));
    if (part_type != "NFC") {
      return absl::UnimplementedError(absl::StrCat(root.path(), ": ", part.Label("type"), ": \"",
                                                   part_type,
                                                   "\" is not supported (only NFC or none)"));
    }
    nfc = true;
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Rep::ParsePreTokenizer(const JsonObject& root) {
  const json* value = root.Find("pre_tokenizer");
  if (value == nullptr) {
    return root.Error("pre_tokenizer", "missing (byte-level BPE needs a ByteLevel pre-tokenizer)");
  }
  ASSIGN_OR_RETURN(JsonObject top, JsonObject::Of(*value, root.path(), "pre_tokenizer"));
  ASSIGN_OR_RETURN(std::string type, top.String("type"));
  std::vector<JsonObject> steps;
  if (type == "Sequence") {
    const json* list = top.Find("pretokenizers");
    if (list == nullptr || !list->is_array() || list->empty()) {
      return top.Error("pretokenizers", "expected a non-empty array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      ASSIGN_OR_RETURN(JsonObject step, JsonObject::Of((*list)[i], root.path(),
                                                       Indexed(top.Label("pretokenizers"), i)));
      steps.push_back(step);
    }
  } else {
    steps.push_back(top);
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSIGN_OR_RETURN(std::string step_type, steps[i].String("type"));
    const bool last = i + 1 == steps.size();
    if (step_type == "Split" && !last) {
      RETURN_IF_ERROR(ParseSplit(steps[i]));
    } else if (step_type == "ByteLevel" && last) {
      RETURN_IF_ERROR(ParseByteLevel(steps[i]));
    } else {
      // Any other step, or these in another order, would need a different pipeline; refusing
      // beats producing ids that silently differ from the reference.
      return absl::UnimplementedError(absl::StrCat(
          root.path(), ": ", steps[i].Label("type"), ": \"", step_type,
          "\" is not supported here (supported: Split steps followed by one ByteLevel)"));
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Rep::ParseSplit(const JsonObject& split) {
  ASSIGN_OR_RETURN(JsonObject pattern, split.Object("pattern"));
  std::string regex;
  if (pattern.Has("Regex")) {
    ASSIGN_OR_RETURN(regex, pattern.String("Regex"));
  } else if (pattern.Has("String")) {
    ASSIGN_OR_RETURN(std::string literal, pattern.String("String"));
    for (char c : literal) {
      if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) {
        regex.push_back('\\');
      }
      regex.push_back(c);
    }
  } else {
    return split.Error("pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
  }
  ASSIGN_OR_RETURN(std::optional<bool> invert, split.OptionalBool("invert"));
  if (invert.value_or(false)) {
    return absl::UnimplementedError(
        absl::StrCat(split.path(), ": ", split.Label("invert"), ": true is not supported"));
  }
  ASSIGN_OR_RETURN(std::string behavior, split.String("behavior"));
  if (behavior != "Isolated" && behavior != "Removed") {
    return absl::UnimplementedError(absl::StrCat(split.path(), ": ", split.Label("behavior"),
                                                 ": \"", behavior,
                                                 "\" is not supported (only Isolated or Removed)"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Regex> compiled,
                   Regex::Compile(regex, absl::StrCat(split.path(), ": ", split.Label("pattern"))));
  splits.push_back(SplitStep{std::move(compiled), behavior == "Isolated"});
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Rep::ParseByteLevel(const JsonObject& byte_level) {
  ASSIGN_OR_RETURN(std::optional<bool> add_prefix_space,
                   byte_level.OptionalBool("add_prefix_space"));
  if (add_prefix_space.value_or(false)) {
    return absl::UnimplementedError(absl::StrCat(
        byte_level.path(), ": ", byte_level.Label("add_prefix_space"), ": true is not supported"));
  }
  ASSIGN_OR_RETURN(std::optional<bool> use_regex, byte_level.OptionalBool("use_regex"));
  if (use_regex.value_or(true)) {
    ASSIGN_OR_RETURN(std::unique_ptr<Regex> compiled,
                     Regex::Compile(kGpt2Pattern, "GPT-2 pattern"));
    splits.push_back(SplitStep{std::move(compiled), true});
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Rep::ParseModel(const JsonObject& root) {
  ASSIGN_OR_RETURN(JsonObject model, root.Object("model"));
  ASSIGN_OR_RETURN(std::optional<std::string> type, model.OptionalString("type"));
  if (type.has_value() && *type != "BPE") {
    return absl::UnimplementedError(absl::StrCat(root.path(), ": ", model.Label("type"), ": \"",
                                                 *type, "\" is not supported (only BPE)"));
  }
  ASSIGN_OR_RETURN(std::optional<double> dropout, model.OptionalNumber("dropout"));
  if (dropout.value_or(0.0) != 0.0) {
    return absl::UnimplementedError(
        absl::StrCat(root.path(), ": ", model.Label("dropout"), ": BPE dropout is not supported"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    ASSIGN_OR_RETURN(std::optional<std::string> affix, model.OptionalString(key));
    if (!affix.value_or("").empty()) {
      return absl::UnimplementedError(
          absl::StrCat(root.path(), ": ", model.Label(key), ": only \"\" is supported"));
    }
  }
  ASSIGN_OR_RETURN(std::optional<bool> byte_fallback, model.OptionalBool("byte_fallback"));
  if (byte_fallback.value_or(false)) {
    return absl::UnimplementedError(
        absl::StrCat(root.path(), ": ", model.Label("byte_fallback"), ": true is not supported"));
  }
  ASSIGN_OR_RETURN(std::optional<bool> ignore, model.OptionalBool("ignore_merges"));
  ignore_merges = ignore.value_or(false);
  ASSIGN_OR_RETURN(std::optional<bool> fuse, model.OptionalBool("fuse_unk"));
  fuse_unk = fuse.value_or(false);

  const json* vocab_json = model.Find("vocab");
  if (vocab_json == nullptr || !vocab_json->is_object()) {
    return model.Error("vocab", "expected an object of token -> id");
  }
  // Ids must be dense, 0 .. size-1: tables are indexed by id, and a stray huge id must be an
  // error rather than a giant allocation.
  const int64_t vocab_count = static_cast<int64_t>(vocab_json->size());
  vocab.reserve(vocab_json->size());
  for (const auto& [token, id_json] : vocab_json->items()) {
    ASSIGN_OR_RETURN(int64_t id, JsonToInt(id_json, 0, vocab_count - 1, root.path(),
                                           absl::StrCat(model.Label("vocab"), ".", token)));
    vocab.emplace(token, static_cast<int32_t>(id));
  }
  id_bytes.assign(vocab.size(), "");
  std::vector<uint8_t> seen(id_bytes.size(), 0);
  for (const auto& [token, id] : vocab) {
    if (seen[id]) {
      return model.Error("vocab", absl::StrCat("id ", id, " is given to more than one token"));
    }
    seen[id] = 1;
    id_bytes[id] = ByteLevelBytes(token);
  }
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    AppendUtf8(ByteToCodepoint()[b], &spelling);
    auto it = vocab.find(spelling);
    byte_ids[b] = it == vocab.end() ? -1 : it->second;
  }

  ASSIGN_OR_RETURN(std::optional<std::string> unk, model.OptionalString("unk_token"));
  if (unk.has_value()) {
    auto it = vocab.find(*unk);
    if (it == vocab.end()) {
      return model.Error("unk_token", absl::StrCat("\"", *unk, "\" is not in model.vocab"));
    }
    unk_id = it->second;
  }

  const json* merges_json = model.Find("merges");
  if (merges_json == nullptr || !merges_json->is_array()) {
    return model.Error("merges", "expected an array");
  }
  merges.reserve(merges_json->size());
  const std::string merges_label = model.Label("merges");
  for (size_t rank = 0; rank < merges_json->size(); ++rank) {
    const json& entry = (*merges_json)[rank];
    std::string left, right;
    if (entry.is_string()) {
      const std::string& line = entry.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(root.path(), ": ", Indexed(merges_label, rank),
                         ": expected \"left right\", got ", JsonSnippet(entry)));
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          root.path(), ": ", Indexed(merges_label, rank),
          ": expected \"left right\" or [\"left\", \"right\"], got ", JsonSnippet(entry)));
    }
    int32_t ids[3];
    const std::string parts[3] = {left, right, left + right};
    for (int k = 0; k < 3; ++k) {
      auto it = vocab.find(parts[k]);
      if (it == vocab.end()) {
        return absl::InvalidArgumentError(absl::StrCat(root.path(), ": ",
                                                       Indexed(merges_label, rank), ": token \"",
                                                       parts[k], "\" is not in model.vocab"));
      }
      ids[k] = it->second;
    }
    // A repeated pair keeps its last rank, as the reference's map insertion does.
    merges.insert_or_assign(PairKey(ids[0], ids[1]), Merge{static_cast<uint32_t>(rank), ids[2]});
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Rep::ParseAddedTokens(const JsonObject& root) {
  const json* list = root.Find("added_tokens");
  if (list == nullptr) return absl::OkStatus();
  if (!list->is_array()) return root.Error("added_tokens", "expected an array");
  added.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    ASSIGN_OR_RETURN(JsonObject entry,
                     JsonObject::Of((*list)[i], root.path(), Indexed("added_tokens", i)));
    AddedToken token;
    // Added ids extend the vocabulary; bounding them keeps the id tables dense.
    ASSIGN_OR_RETURN(int64_t id,
                     entry.Int("id", 0, static_cast<int64_t>(id_bytes.size() + list->size()) - 1));
    token.id = static_cast<int32_t>(id);
    ASSIGN_OR_RETURN(token.content, entry.String("content"));
    if (token.content.empty()) return entry.Error("content", "must not be empty");
    if (absl::Status s = ValidateUtf8(token.content); !s.ok()) {
      return entry.Error("content", std::string(s.message()));
    }
    const std::pair<const char*, bool*> flags[] = {{"special", &token.special},
                                                   {"lstrip", &token.lstrip},
                                                   {"rstrip", &token.rstrip},
                                                   {"single_word", &token.single_word},
                                                   {"normalized", &token.normalized}};
    for (const auto& [key, field] : flags) {
      ASSIGN_OR_RETURN(std::optional<bool> flag, entry.OptionalBool(key));
      if (flag.has_value()) *field = *flag;
    }
    added.push_back(std::move(token));
  }
  for (const AddedToken& token : added) {
    added_by_content.insert_or_assign(token.content, token.id);
    if (!token.normalized) {
      raw_matcher.Add(token.content, &token);
    } else if (nfc) {
      ASSIGN_OR_RETURN(std::string pattern, Nfc(token.content));
      normalized_matcher.Add(std::move(pattern), &token);
    } else {
      normalized_matcher.Add(token.content, &token);
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Rep::ParseDecoder(const JsonObject& root) {
  const json* value = root.Find("decoder");
  if (value == nullptr) return root.Error("decoder", "missing (expected ByteLevel)");
  ASSIGN_OR_RETURN(JsonObject decoder, JsonObject::Of(*value, root.path(), "decoder"));
  ASSIGN_OR_RETURN(std::string type, decoder.String("type"));
  if (type != "ByteLevel") {
    return absl::UnimplementedError(absl::StrCat(root.path(), ": ", decoder.Label("type"), ": \"",
                                                 type, "\" is not supported (only ByteLevel)"));
  }
  return absl::OkStatus();
}

template <typename Emit>
absl::Status BpeTokenizer::Rep::PreTokenize(size_t step, std::string_view piece, Emit& emit) const {
  if (piece.empty()) return absl::OkStatus();
  if (step == splits.size()) {
    emit(piece);
    return absl::OkStatus();
  }
  const SplitStep& split = splits[step];
  size_t gap = 0;
  RETURN_IF_ERROR(split.regex->ForEachMatch(piece, [&](size_t begin, size_t end) {
    RETURN_IF_ERROR(PreTokenize(step + 1, piece.substr(gap, begin - gap), emit));
    if (split.keep_matches)
      RETURN_IF_ERROR(PreTokenize(step + 1, piece.substr(begin, end - begin), emit));
    gap = end;
    return absl::OkStatus();
  }));
  return PreTokenize(step + 1, piece.substr(gap), emit);
}

void BpeTokenizer::Rep::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  if (cacheable && cache.Lookup(word, ids)) return;
  const size_t first = ids->size();
  Bpe(word, ids);
  if (cacheable) cache.Insert(word, std::span<const int32_t>(*ids).subspan(first));
}

// The reference's merge loop: repeatedly apply the lowest-ranked merge among adjacent symbols,
// leftmost first on ties, using a heap with lazy invalidation so long words stay n log n.
void BpeTokenizer::Rep::Bpe(std::string_view word, std::vector<int32_t>* ids) const {
  if (ignore_merges) {
    auto it = vocab.find(ByteLevelSpelling(word));
    if (it != vocab.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (unsigned char b : word) {
    int32_t id = byte_ids[b];
    if (id < 0) {
      // Like the reference: an unknown byte becomes unk (runs fused if asked), or is dropped.
      if (unk_id < 0) continue;
      if (fuse_unk && !symbols.empty() && symbols.back().id == unk_id) continue;
      id = unk_id;
    }
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, index + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  const auto worse = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::vector<Candidate> heap;
  const auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == merges.end()) return;
    heap.push_back(Candidate{it->second.rank, left, it->second.new_id});
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges.find(PairKey(left.id, right.id));
    if (it == merges.end() || it->second.new_id != top.new_id) continue;  // stale
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
BpeTokenizer::~BpeTokenizer() = default;

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::LoadFromFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return LoadFromJson(text, path);
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::LoadFromJson(
    std::string_view json_text, const std::string& source) {
  ASSIGN_OR_RETURN(json doc, ParseJson(json_text, source));
  ASSIGN_OR_RETURN(JsonObject root, JsonObject::Of(doc, source));
  auto rep = std::make_unique<Rep>();
  // The normalizer comes first: normalized added tokens are matched in their normalized form.
  RETURN_IF_ERROR(rep->ParseNormalizer(root));
  RETURN_IF_ERROR(rep->ParsePreTokenizer(root));
  RETURN_IF_ERROR(rep->ParseModel(root));
  RETURN_IF_ERROR(rep->ParseAddedTokens(root));
  RETURN_IF_ERROR(rep->ParseDecoder(root));

  int32_t size = static_cast<int32_t>(rep->id_bytes.size());
  for (const AddedToken& token : rep->added) size = std::max(size, token.id + 1);
  rep->id_bytes.resize(size);
  rep->id_special.assign(size, 0);
  for (const AddedToken& token : rep->added) {
    rep->id_bytes[token.id] = token.content;
    rep->id_special[token.id] = token.special;
  }
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(rep)));
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::EncodePieces(
    std::span<const TextPiece> pieces) const {
  ASSIGN_OR_RETURN(const JoinedPieces joined, JoinedPieces::Join(pieces));
  const Rep& rep = *rep_;
  const std::string_view text = joined.text();
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  const auto push_id = [&](int32_t id) { ids.push_back(id); };
  const auto encode_word = [&](std::string_view word) { rep.EncodeWord(word, &ids); };
  // Added tokens cut the text into runs; each run is pre-tokenized whole, across pieces.
  const auto encode_normalized = [&](const JoinedPieces& normalized, size_t from, size_t to) {
    const auto pre_tokenize = [&](size_t b, size_t e) {
      return rep.PreTokenize(0, normalized.text().substr(b, e - b), encode_word);
    };
    return SplitOnAddedTokens(rep.normalized_matcher, normalized, from, to, pre_tokenize, push_id);
  };
  const auto encode_raw = [&](size_t from, size_t to) -> absl::Status {
    if (!rep.nfc || IsAscii(text.substr(from, to - from))) {
      return encode_normalized(joined, from, to);
    }
    // Each piece is normalized on its own, so a boundary still separates template text from
    // the user's (NFC differs from the whole string's only where a piece starts with a
    // character that composes with, or reorders against, the one before it).
    JoinedPieces normalized;
    for (const JoinedPieces::Piece& piece : joined.pieces()) {
      const size_t b = std::max(piece.begin, from);
      const size_t e = std::min(piece.end, to);
      if (b >= e) continue;
      ASSIGN_OR_RETURN(const std::string part, Nfc(text.substr(b, e - b)));
      normalized.Append(part, piece.special_tokens_allowed);
    }
    return encode_normalized(normalized, 0, normalized.text().size());
  };
  RETURN_IF_ERROR(SplitOnAddedTokens(rep.raw_matcher, joined, 0, text.size(), encode_raw, push_id));
  return ids;
}

std::string BpeTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && rep_->id_special[id]) continue;
    out += rep_->id_bytes[id];
  }
  return out;
}

std::string BpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || rep_->id_special[id]) return "";
  return rep_->id_bytes[id];
}

int32_t BpeTokenizer::vocab_size() const { return static_cast<int32_t>(rep_->id_bytes.size()); }

std::optional<int32_t> BpeTokenizer::TokenToId(std::string_view token) const {
  if (auto it = rep_->added_by_content.find(token); it != rep_->added_by_content.end()) {
    return it->second;
  }
  if (auto it = rep_->vocab.find(token); it != rep_->vocab.end()) return it->second;
  return std::nullopt;
}

bool BpeTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && rep_->id_special[id];
}

}  // namespace gecd::model
