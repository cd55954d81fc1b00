// libFuzzer target: text::ComputeEdits on an arbitrary pair of byte strings. The input is the
// source, a backslash and one more byte (FuzzedDataProvider's ConsumeRandomLengthString), then
// the target. What edits.h promises must hold for any bytes: the edits are sorted, disjoint and
// within the source, no edit boundary falls inside a run of non-ASCII bytes (so a UTF-8
// sequence is never split, in the source or in the target), and ApplyEdits gives the target.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "text/edits.h"

namespace {

// True when offset `at` of `text` lies between two non-ASCII bytes.
bool SplitsNonAscii(std::string_view text, size_t at) {
  return at > 0 && at < text.size() && static_cast<unsigned char>(text[at - 1]) >= 0x80 &&
         static_cast<unsigned char>(text[at]) >= 0x80;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  const std::string source = input.ConsumeRandomLengthString();
  const std::string target = input.ConsumeRemainingBytesAsString();

  const std::vector<gecd::text::TextEdit> edits = gecd::text::ComputeEdits(source, target);
  if (source == target && !edits.empty()) std::abort();
  size_t previous_end = 0;
  // Where each edit's replacement lands in the target: its source start shifted by what the
  // edits before it added or removed.
  int64_t shift = 0;
  for (size_t i = 0; i < edits.size(); ++i) {
    const auto& e = edits[i];
    if (e.start > e.end || e.end > source.size()) std::abort();
    // Sorted and disjoint; adjacent changes are merged, so one unchanged byte at least between.
    if (i > 0 && e.start <= previous_end) std::abort();
    if (SplitsNonAscii(source, e.start) || SplitsNonAscii(source, e.end)) std::abort();
    const int64_t t0 = static_cast<int64_t>(e.start) + shift;
    const int64_t t1 = t0 + static_cast<int64_t>(e.replacement.size());
    if (t0 < 0 || t1 > static_cast<int64_t>(target.size())) std::abort();
    if (target.compare(t0, e.replacement.size(), e.replacement) != 0) std::abort();
    if (SplitsNonAscii(target, t0) || SplitsNonAscii(target, t1)) std::abort();
    shift += static_cast<int64_t>(e.replacement.size()) - (e.end - e.start);
    previous_end = e.end;
  }
  if (gecd::text::ApplyEdits(source, edits) != target) std::abort();
  return 0;
}
