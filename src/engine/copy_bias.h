#ifndef GECD_ENGINE_COPY_BIAS_H_
#define GECD_ENGINE_COPY_BIAS_H_

#include <cstdint>
#include <span>

// The copy bias: a decoding aid for correction models, whose output is mostly a copy of the
// input text. A small model slips on words it barely knows ("a frightful prospect" -> "a few
// course"); a bonus on the logit of the token that continues the copy keeps such words unless
// the model prefers an edit by a clear margin. Unlike a bonus on every token of the text, it
// follows where in the text the output is, so it favours the right word, not any word of it.
//
// The engine keeps a cursor per sequence and the backend applies the bonus where it samples;
// both move the cursor with AdvanceCopy, so a backend that resolves a token the host has not
// seen yet (BatchSequence::previous_sample) still biases exactly as the host would.
namespace gecd::engine {

struct CopyCursor {
  int position = 0;     // index into the text of the token a plain copy outputs next
  bool aligned = true;  // false right after a token the text does not contain (an edit)
};

// The cursor after `token` is output: just past the occurrence of `token` in `text` nearest to
// `cursor.position` (the lower one on a tie), so an edit that drops, adds or replaces words
// realigns on the next copied token. Unaligned, at the same position, when `text` lacks it.
CopyCursor AdvanceCopy(std::span<const int32_t> text, CopyCursor cursor, int32_t token);

// The token a plain copy outputs next: text[position], `end_token` past the end of the text,
// -1 (none) when the cursor is not aligned.
int32_t CopyCandidate(std::span<const int32_t> text, CopyCursor cursor, int32_t end_token);

// Greedy choice over `logits` with `bias` added to `candidate`'s logit (-1: none); the lowest
// id wins a tie, as in a plain argmax.
int32_t BiasedArgmax(std::span<const float> logits, int32_t candidate, float bias);

}  // namespace gecd::engine

#endif  // GECD_ENGINE_COPY_BIAS_H_
