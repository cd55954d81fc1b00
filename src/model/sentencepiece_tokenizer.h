#ifndef GECD_MODEL_SENTENCEPIECE_TOKENIZER_H_
#define GECD_MODEL_SENTENCEPIECE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer.h"

namespace gecd::model {

class SentencePieceModel;

// A SentencePiece tokenizer.model run by libsentencepiece, ids equal to the python
// `sentencepiece` library's encode(). libsentencepiece is reached only through the
// gecd_sentencepiece_shim module, loaded on first use from $GECD_SENTENCEPIECE_SHIM if set,
// else from the executable's directory, its ../lib/gecd, or its parent directory (how the build
// tree's tests and benches find it). SentencePiece itself never matches control symbols in
// text, so, to keep the Tokenizer contract, control and unknown symbols ("<s>", "</s>",
// "<unk>") written in the text are cut out leftmost-longest first and the text between them
// is encoded piece by piece; those are the special tokens.
//
// Owns the processor. Immutable after loading; all methods may be called concurrently.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> LoadFromFile(
      const std::string& path);
  ~SentencePieceTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  // Each run of ordinary ids is decoded by SentencePiece (which drops the dummy-prefix space);
  // special tokens are their piece text unless skipped.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = true) const override;
  // The piece with U+2581 as a space and <0xNN> byte pieces as that byte; the leading space a
  // dummy prefix adds to the first piece is kept.
  std::string TokenBytes(int32_t id) const override;

  int32_t vocab_size() const override;
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  bool IsSpecial(int32_t id) const override;

 private:
  explicit SentencePieceTokenizer(std::unique_ptr<const SentencePieceModel> sp);
  absl::Status EncodePiece(std::string_view text, std::vector<int32_t>* ids) const;

  std::unique_ptr<const SentencePieceModel> sp_;
  // Special symbols and their ids, longest first (the leftmost-longest match order).
  std::vector<std::pair<std::string, int32_t>> specials_;
};

}  // namespace gecd::model

#endif  // GECD_MODEL_SENTENCEPIECE_TOKENIZER_H_
