#include "worker/text_answer.h"

#include <algorithm>
#include <utility>

#include "text/edit_kind.h"
#include "text/edits.h"

namespace gecd::worker {
namespace {

// Sentence `index`'s edits (appended to `edits`) and span (`out`), in the whole text's
// coordinates converted by `offset`: what the text's answer and a sentence answer both say.
void DescribeSentence(std::string_view text, sentences::SentenceSpan span, size_t index,
                      const SentenceOutcome& outcome, const text::OffsetConverter& offset,
                      google::protobuf::RepeatedPtrField<gecd::v1::Edit>* edits,
                      gecd::v1::Sentence* out) {
  const std::string_view sentence = text.substr(span.begin, span.end - span.begin);
  const std::vector<text::TextEdit> diff = text::ComputeEdits(sentence, outcome.corrected);
  for (const text::TextEdit& e : diff) {
    gecd::v1::Edit* edit = edits->Add();
    edit->set_start(offset(span.begin + e.start));
    edit->set_end(offset(span.begin + e.end));
    edit->set_replacement(e.replacement);
    edit->set_sentence(static_cast<uint32_t>(index));
    edit->set_kind(static_cast<gecd::v1::EditKind>(
        text::ClassifyEdit(sentence.substr(e.start, e.end - e.start), e.replacement)));
  }
  out->set_start(offset(span.begin));
  out->set_end(offset(span.end));
  out->set_changed(!diff.empty());
  out->set_skipped(outcome.skipped);
  out->set_cached(outcome.cached);
}

}  // namespace

gecd::v1::CorrectResponse AssembleAnswer(std::string_view text,
                                         std::span<const sentences::SentenceSpan> spans,
                                         std::span<const SentenceOutcome> outcomes,
                                         text::OffsetUnit unit) {
  const text::OffsetConverter offset(text, unit);
  gecd::v1::CorrectResponse response;
  std::string corrected;
  corrected.reserve(text.size());
  uint32_t kept = 0;  // text before this byte is in `corrected`
  uint64_t prompt_tokens = 0, output_tokens = 0, queue_us = 0, engine_us = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const sentences::SentenceSpan span = spans[i];
    const SentenceOutcome& outcome = outcomes[i];
    corrected.append(text.substr(kept, span.begin - kept));
    corrected.append(outcome.corrected);
    kept = span.end;
    DescribeSentence(text, span, i, outcome, offset, response.mutable_edits(),
                     response.add_sentences());
    prompt_tokens += outcome.prompt_tokens;
    output_tokens += outcome.output_tokens;
    queue_us = std::max(queue_us, outcome.queue_us);
    engine_us = std::max(engine_us, outcome.engine_us);
  }
  corrected.append(text.substr(kept));
  response.set_corrected_text(std::move(corrected));
  response.set_prompt_tokens(static_cast<uint32_t>(prompt_tokens));
  response.set_output_tokens(static_cast<uint32_t>(output_tokens));
  response.set_queue_time_us(queue_us);
  response.set_engine_time_us(engine_us);
  return response;
}

gecd::v1::SentenceAnswer AnswerSentence(std::string_view text,
                                        std::span<const sentences::SentenceSpan> spans,
                                        size_t index, const SentenceOutcome& outcome,
                                        const text::OffsetConverter& offset) {
  gecd::v1::SentenceAnswer answer;
  answer.set_index(static_cast<uint32_t>(index));
  answer.set_sentence_count(static_cast<uint32_t>(spans.size()));
  answer.set_corrected(outcome.corrected);
  DescribeSentence(text, spans[index], index, outcome, offset, answer.mutable_edits(),
                   answer.mutable_sentence());
  return answer;
}

}  // namespace gecd::worker
