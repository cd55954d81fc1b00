#include "server/request_validator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "config/engine_options.h"
#include "model/utf8.h"

namespace gecd::server {

namespace {

size_t CountCodePoints(std::string_view utf8) {
  return static_cast<size_t>(std::count_if(utf8.begin(), utf8.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

}  // namespace

namespace {

// The config loader guarantees the placeholder; without one the text alone is the prompt.
model::PromptTemplate TemplateOf(const config::Config& config) {
  absl::StatusOr<model::PromptTemplate> t = model::PromptTemplate::Parse(config.model.prompt_template);
  return t.ok() ? *std::move(t) : *model::PromptTemplate::Parse(model::PromptTemplate::kPlaceholder);
}

}  // namespace

RequestValidator::RequestValidator(const config::Config& config, const model::Tokenizer& tokenizer,
                                   const model::SpellCorrector* spelling)
    : config_(config), tokenizer_(tokenizer), spelling_(spelling), template_(TemplateOf(config)) {}

absl::StatusOr<Prompt> RequestValidator::Validate(std::string_view text,
                                                  uint32_t max_output_tokens) const {
  if (text.empty()) return absl::InvalidArgumentError("text is empty");
  if (absl::Status utf8 = model::ValidateUtf8(text); !utf8.ok()) return utf8;
  const size_t max_chars = static_cast<size_t>(config_.server.max_input_chars);
  // Bytes bound code points from above, so most texts skip the count.
  if (text.size() > max_chars) {
    if (const size_t chars = CountCodePoints(text); chars > max_chars) {
      return absl::InvalidArgumentError(absl::StrCat("text has ", chars,
                                                     " characters, more than the limit of ",
                                                     max_chars, " (server.max_input_chars)"));
    }
  }
  // The whole prompt is tokenized at once, as the model saw its training prompts.
  absl::StatusOr<std::vector<int32_t>> tokens =
      tokenizer_.Encode(config::PromptText(template_, spelling_, text));
  if (!tokens.ok()) return tokens.status();
  const size_t max_tokens = static_cast<size_t>(config_.model.max_input_tokens);
  if (tokens->size() > max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("prompt is ", tokens->size(),
                                                   " tokens, more than the limit of ", max_tokens,
                                                   " (model.max_input_tokens)"));
  }
  const auto cap = static_cast<uint32_t>(config_.model.max_output_tokens);
  return Prompt{*std::move(tokens),
                static_cast<int>(max_output_tokens == 0 ? cap : std::min(max_output_tokens, cap))};
}

}  // namespace gecd::server
