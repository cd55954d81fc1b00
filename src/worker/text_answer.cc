#include "worker/text_answer.h"

#include <algorithm>
#include <utility>

#include "text/edit_kind.h"
#include "text/edits.h"

namespace gecd::worker {

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
    const std::string_view sentence = text.substr(span.begin, span.end - span.begin);
    corrected.append(text.substr(kept, span.begin - kept));
    corrected.append(outcome.corrected);
    kept = span.end;
    const std::vector<text::TextEdit> edits = text::ComputeEdits(sentence, outcome.corrected);
    for (const text::TextEdit& e : edits) {
      gecd::v1::Edit* edit = response.add_edits();
      edit->set_start(offset(span.begin + e.start));
      edit->set_end(offset(span.begin + e.end));
      edit->set_replacement(e.replacement);
      edit->set_sentence(static_cast<uint32_t>(i));
      edit->set_kind(static_cast<gecd::v1::EditKind>(
          text::ClassifyEdit(sentence.substr(e.start, e.end - e.start), e.replacement)));
    }
    gecd::v1::Sentence* s = response.add_sentences();
    s->set_start(offset(span.begin));
    s->set_end(offset(span.end));
    s->set_changed(!edits.empty());
    s->set_skipped(outcome.skipped);
    s->set_cached(outcome.cached);
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

}  // namespace gecd::worker
