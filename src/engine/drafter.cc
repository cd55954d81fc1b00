#include "engine/drafter.h"

#include <algorithm>
#include <cstdlib>

namespace gecd::engine {

void DraftFromText(std::span<const int32_t> text, std::span<const int32_t> output, int expected,
                   int32_t end_token, int max_drafts, std::vector<int32_t>* drafts) {
  drafts->clear();
  if (max_drafts <= 0) return;
  const int length = static_cast<int>(text.size());
  const int match = std::min<int>(kDraftMatchTokens, static_cast<int>(output.size()));
  const std::span<const int32_t> suffix = output.last(match);
  // `at`: the text position just past the match; an empty output starts the text.
  int at = match == 0 ? 0 : -1;
  for (int q = match; match > 0 && q <= length; ++q) {
    if (!std::equal(suffix.begin(), suffix.end(), text.begin() + (q - match))) continue;
    if (at < 0 || std::abs(q - expected) < std::abs(at - expected)) at = q;
  }
  if (at < 0) return;
  const int copied = std::min(max_drafts, length - at);
  drafts->assign(text.begin() + at, text.begin() + at + copied);
  if (copied < max_drafts && end_token >= 0) drafts->push_back(end_token);
}

}  // namespace gecd::engine
