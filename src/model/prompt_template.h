#ifndef GECD_MODEL_PROMPT_TEMPLATE_H_
#define GECD_MODEL_PROMPT_TEMPLATE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gecd::model {

// The prompt a sentence is wrapped in before tokenization (config `model.prompt_template`,
// e.g. "<s>{text}<sep>"): the text around the first "{text}". text::PromptBuilder, which
// the server, `gecd generate` and `gecd eval` all build prompts with, tokenizes the prefix and
// suffix (where special tokens may be written) apart from the user's text (where they may not).
// Immutable, so thread-safe.
class PromptTemplate {
 public:
  static constexpr std::string_view kPlaceholder = "{text}";

  // InvalidArgument when `pattern` has no "{text}".
  static absl::StatusOr<PromptTemplate> Parse(std::string_view pattern);

  // prefix + text + suffix; later "{text}"s in the pattern are literal text of the suffix.
  std::string Apply(std::string_view text) const;

  const std::string& prefix() const { return prefix_; }
  const std::string& suffix() const { return suffix_; }

 private:
  PromptTemplate(std::string prefix, std::string suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}

  std::string prefix_;
  std::string suffix_;
};

}  // namespace gecd::model

#endif  // GECD_MODEL_PROMPT_TEMPLATE_H_
