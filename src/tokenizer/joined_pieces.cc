#include "tokenizer/joined_pieces.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/utf8.h"

namespace gecd::model {

absl::StatusOr<JoinedPieces> JoinedPieces::Join(std::span<const TextPiece> pieces) {
  JoinedPieces joined;
  size_t size = 0;
  for (const TextPiece& piece : pieces) size += piece.text.size();
  joined.text_.reserve(size);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (absl::Status status = ValidateUtf8(pieces[i].text); !status.ok()) {
      if (pieces.size() == 1) return status;
      return absl::InvalidArgumentError(
          absl::StrCat("text piece ", i, " of ", pieces.size(), ": ", status.message()));
    }
    joined.Append(pieces[i].text, pieces[i].special_tokens_allowed);
  }
  return joined;
}

void JoinedPieces::Append(std::string_view text, bool special_tokens_allowed) {
  if (text.empty()) return;
  pieces_.push_back(Piece{text_.size(), text_.size() + text.size(), special_tokens_allowed});
  text_.append(text);
}

bool JoinedPieces::AllowsTokenAt(size_t begin, size_t end) const {
  // The last piece starting at or before `begin` is the one holding it.
  const auto after = std::upper_bound(pieces_.begin(), pieces_.end(), begin,
                                      [](size_t pos, const Piece& p) { return pos < p.begin; });
  if (after == pieces_.begin()) return false;
  const Piece& piece = *std::prev(after);
  return piece.special_tokens_allowed && end <= piece.end && begin < piece.end;
}

}  // namespace gecd::model
