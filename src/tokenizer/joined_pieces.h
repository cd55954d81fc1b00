#ifndef GECD_TOKENIZER_JOINED_PIECES_H_
#define GECD_TOKENIZER_JOINED_PIECES_H_

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace gecd::model {

// The pieces of one Tokenizer::EncodePieces call laid end to end: the text the tokenizers
// encode, and which of its bytes came from pieces that allow template tokens. Owns a copy of
// the text.
class JoinedPieces {
 public:
  struct Piece {
    size_t begin;
    size_t end;
    bool special_tokens_allowed;
  };

  // InvalidArgument when a piece is not valid UTF-8 (naming the piece when there are several).
  static absl::StatusOr<JoinedPieces> Join(std::span<const TextPiece> pieces);

  // Appends one more piece; empty ones are dropped. `text` is not checked.
  void Append(std::string_view text, bool special_tokens_allowed);

  std::string_view text() const { return text_; }
  // The non-empty pieces, in order.
  const std::vector<Piece>& pieces() const { return pieces_; }
  // Whether [begin, end) lies inside one piece that allows template tokens.
  bool AllowsTokenAt(size_t begin, size_t end) const;

 private:
  std::string text_;
  std::vector<Piece> pieces_;
};

}  // namespace gecd::model

#endif  // GECD_TOKENIZER_JOINED_PIECES_H_
