#ifndef GECD_ENGINE_DRAFTER_H_
#define GECD_ENGINE_DRAFTER_H_

#include <cstdint>
#include <span>
#include <vector>

// Drafts for speculative decoding of a correction ("aggressive decoding", Sun et al. 2021): the
// output is mostly a copy of the user's text, so the tokens that follow where the output has
// reached in the text are a draft the engine verifies in one step. Exactness never depends on
// the draft (the engine keeps only what greedy decoding chooses); a good draft only saves steps.
namespace gecd::engine {

// How many of the output's last tokens must match the text for a draft (the paper's suffix
// match); fewer at the very start of the output.
inline constexpr int kDraftMatchTokens = 2;

// Fills `drafts` with up to `max_drafts` tokens continuing `output` as a copy of `text`,
// `end_token` (>= 0; -1: none) after the text's last token. Where the copy stands: just past
// the occurrence in `text` of the output's last min(kDraftMatchTokens, output.size()) tokens
// nearest to `expected` (the copy position the copy bias tracks; the lower one on a tie), or the
// text's start for an empty output. No match (an edit the text does not contain): no draft.
// Pure.
void DraftFromText(std::span<const int32_t> text, std::span<const int32_t> output, int expected,
                   int32_t end_token, int max_drafts, std::vector<int32_t>* drafts);

}  // namespace gecd::engine

#endif  // GECD_ENGINE_DRAFTER_H_
