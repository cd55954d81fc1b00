#include "tokenizer/byte_level.h"

#include "absl/container/flat_hash_map.h"
#include "tokenizer/utf8.h"

namespace gecd::model {

const std::array<char32_t, 256>& ByteToCodepoint() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

std::string ByteLevelSpelling(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) AppendUtf8(ByteToCodepoint()[b], &out);
  return out;
}

std::string ByteLevelBytes(std::string_view token) {
  static const absl::flat_hash_map<char32_t, unsigned char> to_byte = [] {
    absl::flat_hash_map<char32_t, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[ByteToCodepoint()[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    auto it = to_byte.find(NextCodepoint(token, &i));
    if (it == to_byte.end()) return std::string(token);
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

}  // namespace gecd::model
