#include "engine/copy_bias.h"

#include <algorithm>
#include <cstdlib>

namespace gecd::engine {

CopyCursor AdvanceCopy(std::span<const int32_t> text, CopyCursor cursor, int32_t token) {
  int best = -1;
  for (int j = 0; j < static_cast<int>(text.size()); ++j) {
    if (text[j] != token) continue;
    if (best < 0 || std::abs(j - cursor.position) < std::abs(best - cursor.position)) best = j;
  }
  if (best < 0) return {.position = cursor.position, .aligned = false};
  return {.position = best + 1, .aligned = true};
}

int32_t CopyCandidate(std::span<const int32_t> text, CopyCursor cursor, int32_t end_token) {
  if (!cursor.aligned || cursor.position < 0) return -1;
  if (cursor.position < static_cast<int>(text.size())) return text[cursor.position];
  return cursor.position == static_cast<int>(text.size()) ? end_token : -1;
}

int32_t BiasedArgmax(std::span<const float> logits, int32_t candidate, float bias) {
  const auto best =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (candidate < 0 || candidate >= static_cast<int32_t>(logits.size())) return best;
  const float boosted = logits[candidate] + bias;
  return boosted > logits[best] || (boosted == logits[best] && candidate < best) ? candidate : best;
}

}  // namespace gecd::engine
