#include "model/tokenizer.h"

#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/bpe_tokenizer.h"
#include "model/sentencepiece_tokenizer.h"

namespace gecd::model {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFromModelDir(const std::string& dir) {
  const std::filesystem::path root(dir);
  std::error_code ec;
  const std::filesystem::path json = root / "tokenizer.json";
  if (std::filesystem::is_regular_file(json, ec)) {
    auto tokenizer = BpeTokenizer::LoadFromFile(json.string());
    if (!tokenizer.ok()) return tokenizer.status();
    return std::unique_ptr<Tokenizer>(std::move(*tokenizer));
  }
  const std::filesystem::path model = root / "tokenizer.model";
  if (std::filesystem::is_regular_file(model, ec)) {
    auto tokenizer = SentencePieceTokenizer::LoadFromFile(model.string());
    if (!tokenizer.ok()) return tokenizer.status();
    return std::unique_ptr<Tokenizer>(std::move(*tokenizer));
  }
  return absl::NotFoundError(
      absl::StrCat(dir, ": no tokenizer.json or tokenizer.model in this directory"));
}

}  // namespace gecd::model
