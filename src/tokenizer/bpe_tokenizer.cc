#include "tokenizer/bpe_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/hash/hash.h"
#include "common/mapped_file.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "tokenizer/bpe_tokenizer_json.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/joined_pieces.h"
#include "tokenizer/utf8.h"

namespace gecd::model {

namespace {

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
    MutexLock lock(&shard.mu);
    auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    out->insert(out->end(), it->second.begin(), it->second.end());
    return true;
  }

  void Insert(std::string_view word, std::span<const int32_t> ids) {
    Shard& shard = ShardFor(word);
    MutexLock lock(&shard.mu);
    if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
    shard.map.try_emplace(word, ids.begin(), ids.end());
  }

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 8192;
  struct Shard {
    Mutex mu;
    StringMap<std::vector<int32_t>> map ABSL_GUARDED_BY(mu);
  };
  Shard& ShardFor(std::string_view word) {
    return shards_[absl::Hash<std::string_view>{}(word) % kShards];
  }
  std::array<Shard, kShards> shards_;
};

}  // namespace

struct BpeTokenizer::Rep {
  std::unique_ptr<const BpeTokenizerJson> tables;
  mutable WordCache cache;

  template <typename Emit>
  absl::Status PreTokenize(size_t step, std::string_view piece, Emit& emit) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;
  void Bpe(std::string_view word, std::vector<int32_t>* ids) const;
};

template <typename Emit>
absl::Status BpeTokenizer::Rep::PreTokenize(size_t step, std::string_view piece, Emit& emit) const {
  if (piece.empty()) return absl::OkStatus();
  if (step == tables->splits.size()) {
    emit(piece);
    return absl::OkStatus();
  }
  const SplitStep& split = tables->splits[step];
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
  const BpeTokenizerJson& t = *tables;
  if (t.ignore_merges) {
    auto it = t.vocab.find(ByteLevelSpelling(word));
    if (it != t.vocab.end()) {
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
    int32_t id = t.byte_ids[b];
    if (id < 0) {
      // Like the reference: an unknown byte becomes unk (runs fused if asked), or is dropped.
      if (t.unk_id < 0) continue;
      if (t.fuse_unk && !symbols.empty() && symbols.back().id == t.unk_id) continue;
      id = t.unk_id;
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
    auto it = t.merges.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == t.merges.end()) return;
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
    auto it = t.merges.find(PairKey(left.id, right.id));
    if (it == t.merges.end() || it->second.new_id != top.new_id) continue;  // stale
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
  auto rep = std::make_unique<Rep>();
  ASSIGN_OR_RETURN(rep->tables, BpeTokenizerJson::Parse(json_text, source));
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(rep)));
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::EncodePieces(
    std::span<const TextPiece> pieces) const {
  ASSIGN_OR_RETURN(const JoinedPieces joined, JoinedPieces::Join(pieces));
  const Rep& rep = *rep_;
  const BpeTokenizerJson& t = *rep.tables;
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
    return SplitOnAddedTokens(t.normalized_matcher, normalized, from, to, pre_tokenize, push_id);
  };
  const auto encode_raw = [&](size_t from, size_t to) -> absl::Status {
    if (!t.nfc || IsAscii(text.substr(from, to - from))) {
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
  RETURN_IF_ERROR(SplitOnAddedTokens(t.raw_matcher, joined, 0, text.size(), encode_raw, push_id));
  return ids;
}

std::string BpeTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  const BpeTokenizerJson& t = *rep_->tables;
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && t.id_special[id]) continue;
    out += t.id_bytes[id];
  }
  return out;
}

std::string BpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || rep_->tables->id_special[id]) return "";
  return rep_->tables->id_bytes[id];
}

int32_t BpeTokenizer::vocab_size() const {
  return static_cast<int32_t>(rep_->tables->id_bytes.size());
}

std::optional<int32_t> BpeTokenizer::TokenToId(std::string_view token) const {
  const BpeTokenizerJson& t = *rep_->tables;
  if (auto it = t.added_by_content.find(token); it != t.added_by_content.end()) {
    return it->second;
  }
  if (auto it = t.vocab.find(token); it != t.vocab.end()) return it->second;
  return std::nullopt;
}

bool BpeTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && rep_->tables->id_special[id];
}

}  // namespace gecd::model
