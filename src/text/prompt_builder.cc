#include "text/prompt_builder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "tokenizer/utf8.h"

namespace gecd::text {
namespace {

// C0 and C1 controls and DEL, less the ASCII whitespace controls of ordinary text.
bool IsRefusedControl(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r') return false;
  return c < 0x20 || (c >= 0x7F && c <= 0x9F);
}

}  // namespace

absl::StatusOr<PromptBuilder> PromptBuilder::Create(const config::Config& config,
                                                    const model::Tokenizer& tokenizer,
                                                    const model::SpellCorrector* spelling) {
  ASSIGN_OR_RETURN(model::PromptTemplate prompt_template,
                   model::PromptTemplate::Parse(config.model.prompt_template));
  model::TemplateTokens template_tokens;
  if (config.model.copy_bias > 0 || config.engine.speculate_tokens > 0) {
    ASSIGN_OR_RETURN(template_tokens, model::TemplateTokens::Create(prompt_template, tokenizer));
  }
  return PromptBuilder(config, tokenizer, spelling, std::move(prompt_template),
                       std::move(template_tokens));
}

PromptBuilder::PromptBuilder(const config::Config& config, const model::Tokenizer& tokenizer,
                             const model::SpellCorrector* spelling,
                             model::PromptTemplate prompt_template,
                             model::TemplateTokens template_tokens)
    : tokenizer_(&tokenizer),
      spelling_(spelling),
      template_(std::move(prompt_template)),
      template_tokens_(std::move(template_tokens)),
      max_input_chars_(static_cast<size_t>(config.server.max_input_chars)),
      max_input_tokens_(static_cast<size_t>(config.model.max_input_tokens)),
      max_output_tokens_(static_cast<uint32_t>(config.model.max_output_tokens)),
      copy_bias_(static_cast<float>(config.model.copy_bias)),
      copy_span_(config.model.copy_bias > 0 || config.engine.speculate_tokens > 0),
      max_lookups_(config.spelling.max_lookups) {}

absl::StatusOr<std::vector<int32_t>> PromptBuilder::Encode(std::string_view text) const {
  const model::TextPiece pieces[] = {
      {template_.prefix(), true}, {text, false}, {template_.suffix(), true}};
  return tokenizer_->EncodePieces(pieces);
}

absl::Status PromptBuilder::CheckTokenCount(size_t tokens) const {
  if (tokens <= max_input_tokens_) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("prompt is ", tokens,
                                                 " tokens, more than the limit of ",
                                                 max_input_tokens_, " (model.max_input_tokens)"));
}

absl::Status PromptBuilder::CheckText(std::string_view text) const {
  if (text.empty()) return absl::InvalidArgumentError("text is empty");
  RETURN_IF_ERROR(model::ValidateUtf8(text));
  size_t chars = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t at = i;
    const char32_t c = model::NextCodepoint(text, &i);
    if (IsRefusedControl(c)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "text has the control character U+%04X at byte %d; only tab, line feed, vertical "
          "tab, form feed and carriage return are allowed",
          static_cast<uint32_t>(c), at));
    }
    ++chars;
  }
  if (chars > max_input_chars_) {
    return absl::InvalidArgumentError(absl::StrCat("text has ", chars,
                                                   " characters, more than the limit of ",
                                                   max_input_chars_, " (server.max_input_chars)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckedText> PromptBuilder::Check(std::string_view text, uint32_t max_output_tokens,
                                                 OverTokenLimit over) const {
  RETURN_IF_ERROR(CheckText(text));
  CheckedText checked;
  checked.text = text;
  checked.max_new_tokens =
      static_cast<int>(max_output_tokens == 0 ? max_output_tokens_
                                              : std::min(max_output_tokens, max_output_tokens_));
  // NEL, the one C1 control in White_Space, was refused above.
  bool blank = true;
  for (size_t i = 0; i < text.size() && blank;)
    blank = model::IsWhiteSpace(model::NextCodepoint(text, &i));
  if (blank) {
    checked.unchanged = true;
    return checked;
  }
  ASSIGN_OR_RETURN(checked.tokens, Encode(text));
  if (absl::Status status = CheckTokenCount(checked.tokens.size()); !status.ok()) {
    if (over == OverTokenLimit::kRefuse) return status;
    checked.unchanged = checked.over_token_limit = true;
    checked.tokens.clear();
  }
  return checked;
}

absl::StatusOr<Prompt> PromptBuilder::Build(const CheckedText& checked,
                                            model::SpellCorrector::Budget budget) const {
  Prompt prompt;
  if (spelling_ != nullptr) {
    budget.max_lookups = std::min(budget.max_lookups, max_lookups_);
    prompt.spelling = spelling_->Correct(checked.text, budget);
  }
  if (prompt.spelling.corrected == 0) {
    prompt.tokens = checked.tokens;
  } else {
    ASSIGN_OR_RETURN(prompt.tokens, Encode(prompt.spelling.text));
    RETURN_IF_ERROR(CheckTokenCount(prompt.tokens.size()));
  }
  prompt.params.max_new_tokens = checked.max_new_tokens;
  prompt.params.copy_bias = copy_bias_;
  if (copy_span_) {
    std::tie(prompt.params.copy_begin, prompt.params.copy_end) =
        template_tokens_.TextSpan(prompt.tokens);
  }
  return prompt;
}

}  // namespace gecd::text
