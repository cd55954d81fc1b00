#ifndef GECD_SERVER_REQUEST_VALIDATOR_H_
#define GECD_SERVER_REQUEST_VALIDATOR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "model/prompt_template.h"
#include "model/spell_corrector.h"
#include "model/tokenizer.h"

// Turns a client's sentence into an engine prompt, refusing what the configured limits do not
// allow. Thread-safe: it only reads the config and the (immutable) tokenizer.
namespace gecd::server {

struct Prompt {
  std::vector<int32_t> tokens;  // the template applied to the text, tokenized
  int max_new_tokens = 0;
};

class RequestValidator {
 public:
  // Keeps references: `config`, `tokenizer` and `spelling` (null: no spelling stage) must
  // outlive the validator.
  RequestValidator(const config::Config& config, const model::Tokenizer& tokenizer,
                   const model::SpellCorrector* spelling = nullptr);

  // INVALID_ARGUMENT, with a message naming the limit, for empty text, invalid UTF-8, more
  // than server.max_input_chars characters (code points) or more than model.max_input_tokens
  // prompt tokens. The prompt holds the text after the spelling stage. `max_output_tokens` 0 means model.max_output_tokens; larger is capped at it.
  absl::StatusOr<Prompt> Validate(std::string_view text, uint32_t max_output_tokens) const;

 private:
  const config::Config& config_;
  const model::Tokenizer& tokenizer_;
  const model::SpellCorrector* spelling_;
  model::PromptTemplate template_;  // model.prompt_template
};

}  // namespace gecd::server

#endif  // GECD_SERVER_REQUEST_VALIDATOR_H_
