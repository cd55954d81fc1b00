#ifndef GECD_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
#define GECD_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace gecd::model {

class JoinedPieces;
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
// EncodePieces: the template tokens are those special tokens and the model's user-defined
// symbols (the default model's "<sep>"), which SentencePiece matches itself wherever their
// text occurs. Control and unknown symbols are cut out only inside pieces that allow them, so
// elsewhere their text reaches SentencePiece as ordinary text. Each run between them is
// encoded whole, across pieces; a user-defined symbol SentencePiece found there whose text does
// not lie inside one piece that allows it is spelled out instead, one piece per character: the
// character's own piece where the vocabulary has it, else its UTF-8 bytes as byte pieces
// (<0xNN>), else the unknown id, which is what SentencePiece gives a character it cannot
// spell. The text around it keeps the ids SentencePiece chose for the whole run.
//
// Owns the processor. Immutable after loading; all methods may be called concurrently.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> LoadFromFile(
      const std::string& path);
  ~SentencePieceTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> EncodePieces(
      std::span<const TextPiece> pieces) const override;
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
  // Appends the ids of joined.text()'s [begin, end), which holds no control symbol to cut out.
  absl::Status EncodeRun(const JoinedPieces& joined, size_t begin, size_t end,
                         std::vector<int32_t>* ids) const;
  // Appends the ids of `text` one character at a time (see the class comment).
  void SpellOut(std::string_view text, std::vector<int32_t>* ids) const;

  std::unique_ptr<const SentencePieceModel> sp_;
  // Special symbols and their ids, longest first (the leftmost-longest match order).
  std::vector<std::pair<std::string, int32_t>> specials_;
  std::optional<int32_t> unk_id_;
  bool has_user_defined_ = false;
};

}  // namespace gecd::model

#endif  // GECD_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
