#ifndef GECD_TOKENIZER_BPE_TOKENIZER_H_
#define GECD_TOKENIZER_BPE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace gecd::model {

// Byte-level BPE read from a Hugging Face tokenizer.json (GPT-2, Llama-3, Qwen2 style), matching
// the `tokenizers` library's encode(text, add_special_tokens=False) id for id.
//
// Supported: normalizer null / NFC (alone or in a Sequence); pre_tokenizer ByteLevel, or a
// Sequence of Split (Regex or String pattern, Isolated or Removed, not inverted) ending in
// ByteLevel, without add_prefix_space; model BPE with "a b" or ["a", "b"] merges, ignore_merges,
// unk_token/fuse_unk, no dropout, no subword prefix/suffix; decoder ByteLevel. Added tokens are
// matched leftmost-longest before pre-tokenization, honouring lstrip, rstrip, single_word and
// normalized. The post_processor is ignored: Encode never adds tokens. Anything else is refused
// at load time with an error naming the file and field, rather than silently mis-tokenized.
//
// EncodePieces: the template tokens are all of added_tokens, special or not. In a piece that
// does not allow them their text is normalized, pre-tokenized and merged as ordinary text,
// which is what `tokenizers` does for special tokens under split_special_tokens=True
// (encode_special_tokens); unlike it, non-special added tokens are not matched there either,
// since in the shipped tokenizers they are markup (Qwen3's <think>, <tool_call>,
// <|fim_prefix|>) like SentencePiece's user-defined symbols. Where a piece boundary differs from
// the whole string: an NFC normalizer normalizes each piece on its own, and lstrip/rstrip strip
// only whitespace of the token's own piece (a user's text is never stripped); single_word looks
// at the characters on either side whichever piece they are in.
//
// Owns the vocabulary, merge ranks, compiled (JIT) regexes, the added-token matcher and a
// bounded word -> ids cache. Immutable after loading apart from that cache, which is internally
// locked: all methods may be called concurrently.
class BpeTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> LoadFromFile(const std::string& path);
  // `json` is the file's contents; `source` names it in errors.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> LoadFromJson(std::string_view json,
                                                                    const std::string& source);
  ~BpeTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> EncodePieces(
      std::span<const TextPiece> pieces) const override;
  // Added tokens decode to their literal content; ids outside the vocabulary are skipped.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = true) const override;
  std::string TokenBytes(int32_t id) const override;

  int32_t vocab_size() const override;
  // `token` is an added token's content or a vocabulary entry in its byte-level spelling
  // ("Ġworld").
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  bool IsSpecial(int32_t id) const override;

 private:
  struct Rep;
  explicit BpeTokenizer(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace gecd::model

#endif  // GECD_TOKENIZER_BPE_TOKENIZER_H_
