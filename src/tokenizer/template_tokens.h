#ifndef GECD_TOKENIZER_TEMPLATE_TOKENS_H_
#define GECD_TOKENIZER_TEMPLATE_TOKENS_H_

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/prompt_template.h"
#include "tokenizer/tokenizer.h"

namespace gecd::model {

// A prompt template's prefix and suffix as token ids, to find where the user's text lies in
// a tokenized prompt (the span the engine's copy bias follows). Prompts are tokenized whole,
// as the model saw them in training, so the span is found in the tokens rather than by
// tokenizing the text alone. Immutable.
class TemplateTokens {
 public:
  // The bare "{text}" template: the whole prompt is text.
  TemplateTokens() = default;
  // Errors are the tokenizer's, for a prefix or suffix it cannot encode.
  static absl::StatusOr<TemplateTokens> Create(const PromptTemplate& prompt_template,
                                               const Tokenizer& tokenizer);

  // [begin, end) of `prompt` without the leading tokens it shares with the tokenized prefix
  // and the trailing ones it shares with the tokenized suffix, so that a text whose first or
  // last piece merges with the template loses only the pieces it no longer shares.
  std::pair<int, int> TextSpan(std::span<const int32_t> prompt) const;

 private:
  TemplateTokens(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}

  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

}  // namespace gecd::model

#endif  // GECD_TOKENIZER_TEMPLATE_TOKENS_H_
