#include "engine/copy_bias.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "engine/vector_clones.h"

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

namespace {

// std::max_element's answer (the first of the largest values; NaN is never larger, so a NaN
// first element stays the answer) in two passes the compiler vectorizes without fast-math: the
// largest value over 16 independent lanes, then the first 16-value chunk holding it. The
// scalar max_element was 8% of an int8 step (one per sampled row, 8,000 logits each).
constexpr int kLanes = 16;

GECD_VECTOR_CLONES int32_t Argmax(const float* v, int32_t n) {
  if (n < kLanes || std::isnan(v[0])) {
    return static_cast<int32_t>(std::max_element(v, v + n) - v);
  }
  float lane[kLanes];
  std::fill_n(lane, kLanes, -std::numeric_limits<float>::infinity());
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] = v[i + l] > lane[l] ? v[i + l] : lane[l];
  }
  float best = lane[0];
  for (int l = 1; l < kLanes; ++l) best = lane[l] > best ? lane[l] : best;
  for (int32_t j = i; j < n; ++j) best = v[j] > best ? v[j] : best;
  for (i = 0; i + kLanes <= n; i += kLanes) {
    bool found = false;
    for (int l = 0; l < kLanes; ++l) found |= v[i + l] == best;
    if (found) break;
  }
  for (; i < n; ++i) {
    if (v[i] == best) return i;
  }
  return 0;  // unreachable: best is one of v's values (every non-first NaN is skipped)
}

}  // namespace

int32_t BiasedArgmax(std::span<const float> logits, int32_t candidate, float bias) {
  const int32_t best = Argmax(logits.data(), static_cast<int32_t>(logits.size()));
  if (candidate < 0 || candidate >= static_cast<int32_t>(logits.size())) return best;
  const float boosted = logits[candidate] + bias;
  return boosted > logits[best] || (boosted == logits[best] && candidate < best) ? candidate : best;
}

}  // namespace gecd::engine
