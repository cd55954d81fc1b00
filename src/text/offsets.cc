#include "text/offsets.h"

namespace gecd::text {

OffsetConverter::OffsetConverter(std::string_view text, OffsetUnit unit) : unit_(unit) {
  if (unit == OffsetUnit::kUtf8Bytes) return;
  table_.resize(text.size() + 1);
  uint32_t offset = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    table_[i] = offset;
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: within a code point
    // A 4-byte sequence is a code point outside the BMP: a surrogate pair in UTF-16.
    offset += unit == OffsetUnit::kUtf16CodeUnits && c >= 0xF0 ? 2 : 1;
  }
  table_[text.size()] = offset;
}

uint32_t OffsetConverter::operator()(uint32_t byte) const {
  return unit_ == OffsetUnit::kUtf8Bytes ? byte : table_[byte];
}

}  // namespace gecd::text
