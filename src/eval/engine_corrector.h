#ifndef GECD_EVAL_ENGINE_CORRECTOR_H_
#define GECD_EVAL_ENGINE_CORRECTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "engine/pipelined_engine.h"
#include "eval/corrector.h"
#include "spelling/spell_corrector.h"
#include "text/prompt_builder.h"
#include "tokenizer/tokenizer.h"

namespace gecd::eval {

// Runs sentences through a model in this process, as the server does: the same request
// pipeline (text::PromptBuilder: input checks, spelling stage, template, token limits,
// copy bias; engine::OutputCollector: stop rule; text::OutputText: decoding), greedy decoding until
// an EOS id of generation_config.json (or config.json), continuous batching on engine.backend (cpu
// or cuda) sized by the config's engine section, pipelined as in the engine process. The spelling
// stage has no time budget here, so results do not depend on load. Owns the tokenizer, the spelling
// stage and the engine. `gecd eval` and `gecd generate` use it.
class EngineCorrector final : public Corrector {
 public:
  // Loads `config.model.dir`.
  static absl::StatusOr<std::unique_ptr<EngineCorrector>> Create(const config::Config& config);

  // Adds every sentence to the engine at once and steps until all are done. A sentence that
  // the pipeline refuses (empty, invalid UTF-8, control characters, over a limit) or the
  // engine rejects fails alone; a text of only whitespace comes back unchanged.
  absl::StatusOr<CorrectionRun> CorrectAll(const std::vector<std::string>& texts,
                                           ProgressBar* progress) override;
  std::string Describe() const override;

 private:
  EngineCorrector(std::unique_ptr<model::Tokenizer> tokenizer,
                  std::unique_ptr<model::SpellCorrector> spelling,
                  std::unique_ptr<engine::PipelinedEngine> engine);

  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<model::SpellCorrector> spelling_;  // null: no spelling stage
  std::unique_ptr<engine::PipelinedEngine> engine_;
  std::unique_ptr<text::PromptBuilder> prompts_;  // over tokenizer_ and spelling_
  engine::SpeculationStats counted_;              // the engine's counters after the last run
};

}  // namespace gecd::eval

#endif  // GECD_EVAL_ENGINE_CORRECTOR_H_
