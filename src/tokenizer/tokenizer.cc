#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace gecd::model {

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const {
  const TextPiece whole{text, /*special_tokens_allowed=*/true};
  return EncodePieces(std::span<const TextPiece>(&whole, 1));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFromModelDir(const std::string& dir) {
  const std::filesystem::path root(dir);
  std::error_code ec;
  const std::filesystem::path json = root / "tokenizer.json";
  const std::filesystem::path model = root / "tokenizer.model";
  const bool has_model = std::filesystem::is_regular_file(model, ec);
  if (std::filesystem::is_regular_file(json, ec)) {
    auto tokenizer = BpeTokenizer::LoadFromFile(json.string());
    if (tokenizer.ok()) return std::unique_ptr<Tokenizer>(std::move(*tokenizer));
    // Llama-2 and Mistral ship a Metaspace tokenizer.json, which the byte-level BPE refuses as
    // Unimplemented, beside the SentencePiece model it was converted from; that model gives
    // the same ids. A malformed tokenizer.json stays an error: the checkpoint is broken, and
    // quietly reading another file would hide that.
    if (!has_model || !absl::IsUnimplemented(tokenizer.status())) return tokenizer.status();
  }
  if (has_model) {
    auto tokenizer = SentencePieceTokenizer::LoadFromFile(model.string());
    if (!tokenizer.ok()) return tokenizer.status();
    return std::unique_ptr<Tokenizer>(std::move(*tokenizer));
  }
  const bool is_directory = std::filesystem::is_directory(dir, ec);
  if (!is_directory && ec != std::errc::permission_denied) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such model directory"));
  }
  // A directory the daemon's user cannot search, or one on a path it cannot, hides the files in
  // it: say so rather than "missing" (an image's non-root user and a volume it may not read).
  if (is_directory) (void)std::filesystem::status(json, ec);
  if (ec == std::errc::permission_denied) {
    return absl::PermissionDeniedError(
        absl::StrCat(dir, ": cannot read this model directory: ", ec.message()));
  }
  return absl::NotFoundError(
      absl::StrCat(dir, ": no tokenizer.json or tokenizer.model in this directory"));
}

}  // namespace gecd::model
