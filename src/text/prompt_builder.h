#ifndef GECD_TEXT_PROMPT_BUILDER_H_
#define GECD_TEXT_PROMPT_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "engine/engine.h"
#include "model/prompt_template.h"
#include "spelling/spell_corrector.h"
#include "tokenizer/template_tokens.h"
#include "tokenizer/tokenizer.h"

// The input half of the one request pipeline that the server, `gecd eval` and `gecd generate`
// share: a user's text in, the engine's prompt and generation parameters out. It runs in two
// stages so that a server can admit a request between them: Check() does what is cheap and
// refuses bad input; Build() does what costs (the spelling stage) and what follows from it.
// Keeps references to the tokenizer and the spelling stage; immutable, so thread-safe.
namespace gecd::text {

// A text that passed Check().
struct CheckedText {
  std::string_view text;  // the caller's; it must stay alive until Build()
  // Only whitespace, or (OverTokenLimit::kUnchanged) over model.max_input_tokens: the answer is
  // the text itself, without running the model.
  bool unchanged = false;
  bool over_token_limit = false;  // unchanged because of model.max_input_tokens
  int max_new_tokens = 0;
  std::vector<int32_t> tokens;  // the prompt of the text as written (empty when unchanged)
};

// What Build() gives the engine.
struct Prompt {
  std::vector<int32_t> tokens;
  engine::GenerationParams params;         // max_new_tokens and the copy bias over the user's text
  model::SpellCorrector::Result spelling;  // what the spelling stage did (none: all zero)
};

class PromptBuilder {
 public:
  // From the config: server.max_input_chars, model.{prompt_template, max_input_tokens,
  // max_output_tokens, copy_bias}, engine.speculate_tokens (which needs the text's span too),
  // spelling.max_lookups. `spelling` null: no spelling stage.
  // Both must outlive the builder. Errors: a template the tokenizer cannot encode.
  static absl::StatusOr<PromptBuilder> Create(const config::Config& config,
                                              const model::Tokenizer& tokenizer,
                                              const model::SpellCorrector* spelling);

  // INVALID_ARGUMENT naming the limit for empty text, invalid UTF-8, a control character
  // other than tab, line feed, vertical tab, form feed and carriage return, or more than
  // server.max_input_chars code points: the checks of a whole text, before it is split.
  absl::Status CheckText(std::string_view text) const;

  // What Check does with a prompt over model.max_input_tokens: refuse it (INVALID_ARGUMENT
  // naming the limit), or answer it `unchanged` (one sentence of a whole text).
  enum class OverTokenLimit { kRefuse, kUnchanged };
  // CheckText, then the prompt of the text as written against model.max_input_tokens.
  // `max_output_tokens`: 0 is model.max_output_tokens; larger is capped at it.
  absl::StatusOr<CheckedText> Check(std::string_view text, uint32_t max_output_tokens,
                                    OverTokenLimit over = OverTokenLimit::kRefuse) const;

  // The spelling stage within `budget`'s deadline (and spelling.max_lookups), the template,
  // tokenization and the copy span. INVALID_ARGUMENT when the corrected text's prompt is over
  // model.max_input_tokens. Not for an `unchanged` text.
  absl::StatusOr<Prompt> Build(const CheckedText& checked,
                               model::SpellCorrector::Budget budget = {}) const;

 private:
  PromptBuilder(const config::Config& config, const model::Tokenizer& tokenizer,
                const model::SpellCorrector* spelling, model::PromptTemplate prompt_template,
                model::TemplateTokens template_tokens);

  // The prompt of `text`: template pieces may hold special tokens, the user's text never does.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;
  absl::Status CheckTokenCount(size_t tokens) const;

  const model::Tokenizer* tokenizer_;
  const model::SpellCorrector* spelling_;
  model::PromptTemplate template_;
  model::TemplateTokens template_tokens_;
  size_t max_input_chars_;
  size_t max_input_tokens_;
  uint32_t max_output_tokens_;
  float copy_bias_;
  bool copy_span_;  // the text's span for the copy bias or the engine's drafts
  int max_lookups_;
};

}  // namespace gecd::text

#endif  // GECD_TEXT_PROMPT_BUILDER_H_
