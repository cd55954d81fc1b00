#ifndef GECD_TEXT_OFFSETS_H_
#define GECD_TEXT_OFFSETS_H_

#include <cstdint>
#include <string_view>
#include <vector>

// The unit a client counts offsets in (gecd.v1.OffsetUnit): the answer's offsets are computed in
// UTF-8 bytes and converted once, so a JavaScript, Java or Python client can apply the edits to
// its own string without converting.
namespace gecd::text {

enum class OffsetUnit { kUtf8Bytes = 0, kCodePoints = 1, kUtf16CodeUnits = 2 };

// Byte offsets of one UTF-8 text in another unit. Built once per answer (one pass over the
// text); immutable afterwards.
class OffsetConverter {
 public:
  // `text` must be valid UTF-8 (the worker checked it) and outlive nothing: the table is copied.
  OffsetConverter(std::string_view text, OffsetUnit unit);

  // The offset in the unit of byte `byte` of the text, which must lie on a code point boundary
  // (or be the text's size).
  uint32_t operator()(uint32_t byte) const;

 private:
  OffsetUnit unit_;
  // For each byte offset that starts a code point (and the end): its offset in the unit; empty
  // for kUtf8Bytes.
  std::vector<uint32_t> table_;
};

}  // namespace gecd::text

#endif  // GECD_TEXT_OFFSETS_H_
