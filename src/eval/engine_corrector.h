#ifndef GECD_EVAL_ENGINE_CORRECTOR_H_
#define GECD_EVAL_ENGINE_CORRECTOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "eval/corrector.h"
#include "model/prompt_template.h"
#include "model/spell_corrector.h"
#include "model/tokenizer.h"

namespace gecd::eval {

// Runs sentences through a model in this process, as the server would: the config's spelling
// stage and prompt template (as RequestValidator applies them), its input and output token
// limits, greedy decoding with the config's copy bias until an EOS id of
// generation_config.json (or config.json), and continuous batching on the CPU backend sized
// by the config's engine section. Owns the tokenizer, the spelling stage and the backend.
class EngineCorrector final : public Corrector {
 public:
  // Loads `config.model.dir`.
  static absl::StatusOr<std::unique_ptr<EngineCorrector>> Create(const config::Config& config);

  // Adds every sentence to the engine at once and steps until all are done. A sentence that
  // is empty, invalid UTF-8, over model.max_input_tokens or refused by the engine fails alone.
  absl::StatusOr<CorrectionRun> CorrectAll(const std::vector<std::string>& texts,
                                           ProgressBar* progress) override;

 private:
  EngineCorrector(const config::Config& config, model::PromptTemplate prompt_template,
                  std::unique_ptr<model::Tokenizer> tokenizer,
                  std::unique_ptr<model::SpellCorrector> spelling,
                  std::unique_ptr<engine::CpuBackend> backend, engine::EngineOptions options);

  config::Config config_;
  model::PromptTemplate template_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<model::SpellCorrector> spelling_;  // null: no spelling stage
  std::unique_ptr<engine::CpuBackend> backend_;
  engine::EngineOptions engine_options_;
};

}  // namespace gecd::eval

#endif  // GECD_EVAL_ENGINE_CORRECTOR_H_
