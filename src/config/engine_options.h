#ifndef GECD_CONFIG_ENGINE_OPTIONS_H_
#define GECD_CONFIG_ENGINE_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/prompt_template.h"
#include "model/spell_corrector.h"
#include "model/template_tokens.h"
#include "model/tokenizer.h"

// The settings every command that runs the model (serve, generate, eval) derives the same way.
namespace gecd::config {

// The engine section's settings as the CPU backend takes them.
engine::CpuBackendOptions CpuBackendOptionsFrom(const EngineSection& engine);

// The engine options the checkpoint sets: its EOS ids (generation_config.json's, which
// Checkpoint::Open already filled in from config.json where it had none).
engine::EngineOptions EngineOptionsFrom(const model::Checkpoint& checkpoint);

// The spelling stage the `spelling` section asks for; null when it is off. Errors name the
// missing or malformed file.
absl::StatusOr<std::unique_ptr<model::SpellCorrector>> SpellCorrectorFrom(
    const SpellingSection& spelling);

// What the model reads for a user's `text`, as every command builds it: the text after the
// spelling stage (null: none), in the prompt template; tokenized whole afterwards, as the
// model saw its training prompts.
std::string PromptText(const model::PromptTemplate& prompt_template,
                       const model::SpellCorrector* spelling, std::string_view text);

// model.copy_bias as every prompt gets it: over the prompt's tokens that hold the user's text
// (model::TemplateTokens). Immutable.
class CopyBiasSetting {
 public:
  // No copy bias; needs no tokenizer.
  static CopyBiasSetting Off() { return CopyBiasSetting(0.0f, model::TemplateTokens()); }
  // Errors are the tokenizer's, for a template it cannot encode.
  static absl::StatusOr<CopyBiasSetting> Create(double bias,
                                                const model::PromptTemplate& prompt_template,
                                                const model::Tokenizer& tokenizer);

  // Gives `params` the copy bias for `prompt` (nothing when the bias is 0).
  void Apply(std::span<const int32_t> prompt, engine::GenerationParams* params) const;

 private:
  CopyBiasSetting(float bias, model::TemplateTokens template_tokens)
      : bias_(bias), template_tokens_(std::move(template_tokens)) {}

  float bias_;
  model::TemplateTokens template_tokens_;
};

}  // namespace gecd::config

#endif  // GECD_CONFIG_ENGINE_OPTIONS_H_
