#ifndef GECD_TEXT_EDITS_H_
#define GECD_TEXT_EDITS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// The `edits` of a reply: where the corrected text differs from the original, as byte ranges of
// the original, so a client can underline suggestions without diffing the texts itself.
namespace gecd::text {

// Replace bytes [start, end) of the original with `replacement`; start == end inserts.
struct TextEdit {
  uint32_t start = 0;
  uint32_t end = 0;
  std::string replacement;

  bool operator==(const TextEdit&) const = default;
};

// A word-level diff of `source` against `target`: both are split into words, single
// punctuation marks and whitespace runs, the longest common subsequence of those pieces is kept
// and every run of changed pieces (runs separated only by unchanged whitespace are merged, so
// "a b" -> "x y" is one edit) becomes one edit. Edits are sorted and disjoint, never split a
// UTF-8 sequence, and ApplyEdits(source, ComputeEdits(source, target)) == target for any bytes.
std::vector<TextEdit> ComputeEdits(std::string_view source, std::string_view target);

// `source` with `edits` (sorted, disjoint, in range) applied.
std::string ApplyEdits(std::string_view source, std::span<const TextEdit> edits);

}  // namespace gecd::text

#endif  // GECD_TEXT_EDITS_H_
