#include "config/engine_options.h"

#include <tuple>
#include <utility>
#include <vector>

#include "common/status_macros.h"

namespace gecd::config {

engine::CpuBackendOptions CpuBackendOptionsFrom(const EngineSection& engine) {
  return {.kv_block_size = engine.kv_block_size,
          .num_kv_blocks = engine.kv_cache_blocks,
          .kv_cache_mb = engine.kv_cache_mb,
          .max_step_tokens = engine.max_step_tokens,
          .max_batch_size = engine.max_batch_size,
          .threads = engine.threads};
}

engine::EngineOptions EngineOptionsFrom(const model::Checkpoint& checkpoint) {
  const std::vector<int>& eos = checkpoint.generation_config().eos_token_ids;
  engine::EngineOptions options;
  options.eos_token_ids.assign(eos.begin(), eos.end());
  return options;
}

absl::StatusOr<std::unique_ptr<model::SpellCorrector>> SpellCorrectorFrom(
    const SpellingSection& spelling) {
  if (spelling.dictionary.empty()) return nullptr;
  return model::SpellCorrector::Create(spelling.dictionary, spelling.lexicon,
                                       spelling.min_count);
}

std::string PromptText(const model::PromptTemplate& prompt_template,
                       const model::SpellCorrector* spelling, std::string_view text) {
  return prompt_template.Apply(spelling != nullptr ? spelling->Correct(text) : std::string(text));
}

absl::StatusOr<CopyBiasSetting> CopyBiasSetting::Create(
    double bias, const model::PromptTemplate& prompt_template, const model::Tokenizer& tokenizer) {
  ASSIGN_OR_RETURN(model::TemplateTokens template_tokens,
                   model::TemplateTokens::Create(prompt_template, tokenizer));
  return CopyBiasSetting(static_cast<float>(bias), std::move(template_tokens));
}

void CopyBiasSetting::Apply(std::span<const int32_t> prompt,
                            engine::GenerationParams* params) const {
  if (bias_ <= 0) return;
  params->copy_bias = bias_;
  std::tie(params->copy_begin, params->copy_end) = template_tokens_.TextSpan(prompt);
}

}  // namespace gecd::config
