#include "tokenizer/template_tokens.h"

#include <algorithm>

#include "common/status_macros.h"

namespace gecd::model {

absl::StatusOr<TemplateTokens> TemplateTokens::Create(const PromptTemplate& prompt_template,
                                                      const Tokenizer& tokenizer) {
  ASSIGN_OR_RETURN(std::vector<int32_t> prefix, tokenizer.Encode(prompt_template.prefix()));
  ASSIGN_OR_RETURN(std::vector<int32_t> suffix, tokenizer.Encode(prompt_template.suffix()));
  return TemplateTokens(std::move(prefix), std::move(suffix));
}

std::pair<int, int> TemplateTokens::TextSpan(std::span<const int32_t> prompt) const {
  const int n = static_cast<int>(prompt.size());
  const int head = static_cast<int>(
      std::mismatch(prefix_.begin(), prefix_.end(), prompt.begin(), prompt.end()).first -
      prefix_.begin());
  const int tail = static_cast<int>(
      std::mismatch(suffix_.rbegin(), suffix_.rend(), prompt.rbegin(), prompt.rend()).first -
      suffix_.rbegin());
  // A prompt shorter than prefix + suffix (a text of no tokens) is all template.
  const int end = std::max(head, n - tail);
  return {head, end};
}

}  // namespace gecd::model
