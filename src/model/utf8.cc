#include "model/utf8.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace gecd::model {

namespace {

// Returns the length of the well-formed sequence at text[i], or 0 (Unicode Table 3-7).
size_t WellFormedLength(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  const size_t left = text.size() - i;
  const auto cont = [&](size_t k) { return k < left && (byte(k) & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (left < 2) return 0;
    const unsigned char b1 = byte(1);
    if (b0 == 0xE0 && b1 < 0xA0) return 0;  // overlong
    if (b0 == 0xED && b1 > 0x9F) return 0;  // surrogate
    return cont(1) && cont(2) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (left < 2) return 0;
    const unsigned char b1 = byte(1);
    if (b0 == 0xF0 && b1 < 0x90) return 0;  // overlong
    if (b0 == 0xF4 && b1 > 0x8F) return 0;  // above U+10FFFF
    return cont(1) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

absl::Status ValidateUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII runs dominate real text; skip them eight bytes at a time.
    while (i + 8 <= text.size()) {
      uint64_t word;
      std::memcpy(&word, text.data() + i, 8);
      if (word & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= text.size()) break;
    const size_t n = WellFormedLength(text, i);
    if (n == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8: bad byte sequence at offset ", i));
    }
    i += n;
  }
  return absl::OkStatus();
}

std::string ToValidUtf8(std::string_view text) {
  if (ValidateUtf8(text).ok()) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t i = 0; i < text.size();) {
    const size_t n = WellFormedLength(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace gecd::model
