#include "testing/tokenizer_goldens.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/mapped_file.h"
#include "nlohmann/json.hpp"

namespace gecd::testing {

absl::StatusOr<std::vector<TokenizerGolden>> ReadTokenizerGoldens(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::vector<TokenizerGolden> goldens;
  size_t begin = 0;
  for (size_t line = 1; begin < text->size(); ++line) {
    size_t end = text->find('\n', begin);
    if (end == std::string::npos) end = text->size();
    const nlohmann::json row = nlohmann::json::parse(text->begin() + begin, text->begin() + end,
                                                     nullptr, /*allow_exceptions=*/false);
    begin = end + 1;
    if (!row.is_object() || !row.contains("kind") || !row["kind"].is_string() ||
        !row.contains("text") || !row["text"].is_string() || !row.contains("ids") ||
        !row["ids"].is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": not a golden row"));
    }
    TokenizerGolden golden{row["kind"].get<std::string>(), row["text"].get<std::string>(), {}};
    for (const auto& id : row["ids"]) {
      if (!id.is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": bad id"));
      }
      golden.ids.push_back(id.get<int32_t>());
    }
    goldens.push_back(std::move(golden));
  }
  return goldens;
}

std::string Printable(std::string_view text, size_t max_chars) {
  std::string out;
  for (unsigned char c : text) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("\\x%02x", c);
    }
  }
  return out;
}

}  // namespace gecd::testing
