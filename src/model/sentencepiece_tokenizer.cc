#include "model/sentencepiece_tokenizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/utf8.h"

// libsentencepiece's header declares `namespace absl { using std::string_view; }`, which
// collides with Debian's Abseil, whose absl::string_view is its own class. Renaming that
// namespace for this one include is safe: the alias names std::string_view either way, so the
// declarations (and their mangled names) are exactly the library's.
#define absl sentencepiece_absl
#include <sentencepiece_processor.h>
#undef absl

namespace gecd::model {

namespace {

absl::Status FromSentencePiece(const sentencepiece::util::Status& status,
                               std::string_view context) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(status.code())),
                      absl::StrCat(std::string(context), ": ", status.error_message()));
}

// Parses a byte-fallback piece "<0xNN>".
std::optional<char> BytePieceValue(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return std::nullopt;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    const int digit = (c >= '0' && c <= '9')   ? c - '0'
                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                      : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                               : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + digit;
  }
  return static_cast<char>(value);
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(
    std::unique_ptr<sentencepiece::SentencePieceProcessor> sp)
    : sp_(std::move(sp)) {
  for (int id = 0; id < sp_->GetPieceSize(); ++id) {
    if (sp_->IsControl(id) || sp_->IsUnknown(id)) specials_.emplace_back(sp_->IdToPiece(id), id);
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::LoadFromFile(
    const std::string& path) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  RETURN_IF_ERROR(FromSentencePiece(sp->Load(path), path));
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(sp)));
}

absl::Status SentencePieceTokenizer::EncodePiece(std::string_view text,
                                                 std::vector<int32_t>* ids) const {
  std::vector<int> piece_ids;
  RETURN_IF_ERROR(FromSentencePiece(sp_->Encode(text, &piece_ids), "SentencePiece encode"));
  ids->insert(ids->end(), piece_ids.begin(), piece_ids.end());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text) const {
  RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<int32_t> ids;
  size_t gap = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto special = std::find_if(specials_.begin(), specials_.end(), [&](const auto& s) {
      return text.compare(pos, s.first.size(), s.first) == 0;
    });
    if (special == specials_.end()) {
      ++pos;
      continue;
    }
    if (gap < pos) RETURN_IF_ERROR(EncodePiece(text.substr(gap, pos - gap), &ids));
    ids.push_back(special->second);
    pos += special->first.size();
    gap = pos;
  }
  if (gap < text.size()) RETURN_IF_ERROR(EncodePiece(text.substr(gap), &ids));
  return ids;
}

std::string SentencePieceTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  std::vector<int> run;
  const auto flush = [&] {
    if (run.empty()) return;
    std::string text;
    // Ids are range-checked below, the only way SentencePiece's decode fails.
    if (sp_->Decode(run, &text).ok()) out += text;
    run.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (IsSpecial(id)) {
      flush();
      if (!skip_special) out += sp_->IdToPiece(id);
    } else {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

std::string SentencePieceTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || IsSpecial(id)) return "";
  const std::string& piece = sp_->IdToPiece(id);
  if (sp_->IsByte(id)) {
    if (std::optional<char> byte = BytePieceValue(piece)) return std::string(1, *byte);
  }
  static constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (std::string_view(piece).substr(i, kSpace.size()) == kSpace) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

int32_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

std::optional<int32_t> SentencePieceTokenizer::TokenToId(std::string_view token) const {
  const int id = sp_->PieceToId(token);
  // PieceToId answers unk_id for pieces it does not know.
  if (id == sp_->unk_id() && sp_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

bool SentencePieceTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && (sp_->IsControl(id) || sp_->IsUnknown(id));
}

}  // namespace gecd::model
