#ifndef GECD_MODEL_TOKENIZER_H_
#define GECD_MODEL_TOKENIZER_H_

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
// valid UTF-8 s, up to the tokenizer's own normalization (Qwen's NFC gives back NFC(s)).
namespace gecd::model {

// TEMPORARY (replaced by the tokenizer branch's real API at merge).
struct TextPiece {
  std::string_view text;
  bool special_tokens_allowed;
};

class Tokenizer {
 public:
  virtual absl::StatusOr<std::vector<int32_t>> EncodePieces(std::span<const TextPiece> pieces) const {
    std::string all;
    for (const TextPiece& p : pieces) all.append(p.text);
    return Encode(all);
  }
  virtual ~Tokenizer() = default;

  // Loads tokenizer.json from `dir` if present, else tokenizer.model; a tokenizer.json of a
  // kind the native BPE does not implement (Metaspace, as Llama-2 and Mistral ship) falls back
  // to a tokenizer.model beside it. NotFound naming `dir` when neither exists; errors name the
  // file and field for malformed or unsupported ones.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFromModelDir(const std::string& dir);

  // Special and added tokens written literally in `text` (e.g. "<|im_start|>") map to their
  // ids; no BOS/EOS is added. Invalid UTF-8 is an InvalidArgument error.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  // Concatenated bytes of the pieces; special tokens are left out when `skip_special`.
  virtual std::string Decode(std::span<const int32_t> ids, bool skip_special = true) const = 0;
  // Raw bytes of one token (for incremental detokenization); empty for special tokens.
  virtual std::string TokenBytes(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
};

}  // namespace gecd::model

#endif  // GECD_MODEL_TOKENIZER_H_
