#ifndef GECD_TOKENIZER_TOKENIZER_H_
#define GECD_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// Text <-> token ids. Implementations: byte-level BPE from a Hugging Face tokenizer.json
// (GPT-2, Llama-3, Qwen2 style) and SentencePiece from a tokenizer.model. Encodings equal the
// reference libraries' ids exactly; Decode(Encode(s), /*skip_special=*/false) == s for every
// valid UTF-8 s, up to the tokenizer's own normalization (Qwen's NFC gives back NFC(s); a
// SentencePiece model with remove_extra_whitespaces collapses runs of spaces).
namespace gecd::model {

// One part of a prompt: template text, where special and added tokens written literally map to
// their ids, or user text, which never produces a special or added token (see EncodePieces).
struct TextPiece {
  std::string_view text;
  bool special_tokens_allowed;
};

// Thread safety: every method is const, and any of them (Encode, EncodePieces, Decode,
// TokenBytes, the look-ups) may be called from any number of threads at once on one tokenizer
// without external locking, between the loader's return and destruction (which must not race
// with a call). Concurrent calls return exactly what serial calls would. What the
// implementations rely on: BpeTokenizer's tables are immutable after loading, its word -> ids
// cache is sharded and internally locked (a call may wait briefly for a shard another thread
// holds; it never changes a result), and PCRE2 matching uses per-thread match data;
// SentencePieceTokenizer only calls SentencePieceProcessor's const Encode and Decode, which
// do not modify the loaded model. LoadFromModelDir may also be called from several threads.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads tokenizer.json from `dir` if present, else tokenizer.model; a tokenizer.json of a
  // kind the native BPE does not implement (Metaspace, as Llama-2 and Mistral ship) falls back
  // to a tokenizer.model beside it. NotFound naming `dir` when neither exists; errors name the
  // file and field for malformed or unsupported ones.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFromModelDir(const std::string& dir);

  // Encodes the concatenation of `pieces` as Encode would encode it whole, except that special
  // and added tokens (the template tokens: for BPE every entry of added_tokens, special or not;
  // for SentencePiece its control, unknown and user-defined symbols) are matched only inside
  // pieces that allow them, never across a piece boundary; elsewhere their literal text is
  // encoded as ordinary text, and Decode gives it back. Text between two template-token
  // matches is one run of ordinary text even where it spans pieces, so a prompt whose user text
  // holds no template-token text gets exactly the ids Encode gives the whole string (the ids the
  // model was trained on). The implementations state where a piece boundary can still differ
  // from the whole string (normalization, whitespace stripping). No BOS/EOS is added. Invalid
  // UTF-8 in any piece is an InvalidArgument error naming the piece.
  virtual absl::StatusOr<std::vector<int32_t>> EncodePieces(
      std::span<const TextPiece> pieces) const = 0;
  // EncodePieces({{text, /*special_tokens_allowed=*/true}}): template tokens written literally
  // anywhere in `text` (e.g. "<|im_start|>") map to their ids. Never use it on a user's text;
  // give that to EncodePieces as a piece that does not allow them.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;
  // Concatenated bytes of the pieces; special tokens are left out when `skip_special`.
  virtual std::string Decode(std::span<const int32_t> ids, bool skip_special = true) const = 0;
  // Raw bytes of one token (for incremental detokenization); empty for special tokens.
  virtual std::string TokenBytes(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  // Special tokens are left out by Decode(skip_special) and have no TokenBytes: BPE's added
  // tokens marked "special", SentencePiece's control and unknown symbols. The other template
  // tokens (BPE's non-special added tokens, SentencePiece's user-defined symbols such as the
  // default model's "<sep>") decode as their text.
  virtual bool IsSpecial(int32_t id) const = 0;
};

}  // namespace gecd::model

#endif  // GECD_TOKENIZER_TOKENIZER_H_
