#ifndef GECD_WORKER_TEXT_ANSWER_H_
#define GECD_WORKER_TEXT_ANSWER_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "gecd/v1/grammar.pb.h"
#include "sentences/sentence_splitter.h"
#include "text/offsets.h"

// The merge half of the worker's fan-out: a whole text's answer from its sentences' answers.
namespace gecd::worker {

// What one sentence of a text came back with.
struct SentenceOutcome {
  std::string corrected;   // the sentence as corrected (as written when skipped)
  bool skipped = false;    // over model.max_input_tokens: not corrected
  bool cached = false;     // answered from the sentence cache
  bool cacheable = false;  // the engine's answer, not dependent on a time budget: may be cached
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 0;
  uint64_t queue_us = 0;
  uint64_t engine_us = 0;
};

// The answer to `text` whose sentences `spans` (bytes, from sentences::SentenceSplitter) came
// back as `outcomes` (one each): corrected_text is the text with each sentence replaced by its
// correction and every byte between sentences kept; edits are the word-level diff of each
// sentence (text::ComputeEdits) in the coordinates of the whole original text, each naming its
// sentence and its kind (text::ClassifyEdit); sentences lists each span and whether it changed.
// Every offset is converted to `unit`. Token counts are summed, times are the longest sentence's.
// `text` must be valid UTF-8.
gecd::v1::CorrectResponse AssembleAnswer(std::string_view text,
                                         std::span<const sentences::SentenceSpan> spans,
                                         std::span<const SentenceOutcome> outcomes,
                                         text::OffsetUnit unit);

// Sentence `index` of `text` answered alone (CorrectStream's `stream_sentences`): its span,
// correction and edits exactly as AssembleAnswer puts them in the whole text's answer (the same
// code makes both), offsets converted by `offset` (an OffsetConverter of the whole `text`).
gecd::v1::SentenceAnswer AnswerSentence(std::string_view text,
                                        std::span<const sentences::SentenceSpan> spans,
                                        size_t index, const SentenceOutcome& outcome,
                                        const text::OffsetConverter& offset);

}  // namespace gecd::worker

#endif  // GECD_WORKER_TEXT_ANSWER_H_
