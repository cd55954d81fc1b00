#include "eval/engine_corrector.h"

#include <chrono>
#include <utility>

#include "common/status_macros.h"
#include "engine/output_collector.h"
#include "engine_options/engine_options.h"
#include "model/checkpoint.h"
#include "spelling/spelling_config.h"
#include "text/output_text.h"

namespace gecd::eval {

EngineCorrector::EngineCorrector(std::unique_ptr<model::Tokenizer> tokenizer,
                                 std::unique_ptr<model::SpellCorrector> spelling,
                                 std::unique_ptr<engine::PipelinedEngine> engine)
    : tokenizer_(std::move(tokenizer)),
      spelling_(std::move(spelling)),
      engine_(std::move(engine)) {}

absl::StatusOr<std::unique_ptr<EngineCorrector>> EngineCorrector::Create(
    const config::Config& config) {
  // The checkpoint first: its errors say best what is wrong with a model directory.
  ASSIGN_OR_RETURN(std::unique_ptr<model::Checkpoint> checkpoint,
                   model::Checkpoint::Open(config.model.dir));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> tokenizer,
                   model::Tokenizer::LoadFromModelDir(config.model.dir));
  ASSIGN_OR_RETURN(std::unique_ptr<model::SpellCorrector> spelling,
                   model::SpellCorrectorFrom(config.spelling));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Backend> backend,
                   config::CreateBackend(config, *checkpoint));
  auto engine = std::make_unique<engine::PipelinedEngine>(
      std::move(backend), tokenizer.get(), config::EngineOptionsFrom(*checkpoint, config.engine));
  std::unique_ptr<EngineCorrector> corrector(
      new EngineCorrector(std::move(tokenizer), std::move(spelling), std::move(engine)));
  ASSIGN_OR_RETURN(
      text::PromptBuilder prompts,
      text::PromptBuilder::Create(config, *corrector->tokenizer_, corrector->spelling_.get()));
  corrector->prompts_ = std::make_unique<text::PromptBuilder>(std::move(prompts));
  return corrector;
}

std::string EngineCorrector::Describe() const { return engine_->backend().Describe(); }

absl::StatusOr<CorrectionRun> EngineCorrector::CorrectAll(const std::vector<std::string>& texts,
                                                          ProgressBar* progress) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  CorrectionRun run;
  run.outputs.assign(texts.size(), "");
  run.errors.assign(texts.size(), "");
  const auto fail = [&](size_t i, const absl::Status& status) {
    run.errors[i] = std::string(status.message());
    ++run.failed;
    if (progress != nullptr) progress->Advance();
  };

  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<text::CheckedText> checked = prompts_->Check(texts[i], 0);
    if (!checked.ok()) {
      fail(i, checked.status());
      continue;
    }
    if (checked->unchanged) {
      run.outputs[i] = texts[i];
      if (progress != nullptr) progress->Advance();
      continue;
    }
    absl::StatusOr<text::Prompt> prompt = prompts_->Build(*checked);
    if (!prompt.ok()) {
      fail(i, prompt.status());
      continue;
    }
    if (absl::Status added = engine_->Add(i, std::move(prompt->tokens), std::move(prompt->params));
        !added.ok()) {
      fail(i, added);
    }
  }

  const Clock::time_point engine_start = Clock::now();
  engine::OutputCollector outputs;
  engine::PipelinedEngine::StepOutcome outcome;
  while (engine_->HasWork()) {
    RETURN_IF_ERROR(engine_->Step(&outcome));
    for (const engine::StepEvent& e : outcome.events) {
      if (!outputs.Add(e)) continue;
      const std::vector<int32_t> tokens = outputs.Take(e.id);
      run.generated_tokens += static_cast<int64_t>(tokens.size());
      run.outputs[e.id] = text::OutputText(*tokenizer_, tokens);
      if (progress != nullptr) progress->Advance();
    }
  }
  const Clock::time_point end = Clock::now();
  run.wall_s = std::chrono::duration<double>(end - start).count();
  run.engine_wall_s = std::chrono::duration<double>(end - engine_start).count();
  // The engine's counters cover every CorrectAll of this corrector: this run's are the change.
  const engine::SpeculationStats& stats = engine_->engine().speculation();
  run.sequence_steps = stats.sequence_steps - counted_.sequence_steps;
  run.accepted_drafts = stats.accepted - counted_.accepted;
  run.rejected_drafts = stats.rejected - counted_.rejected;
  counted_ = stats;
  return run;
}

}  // namespace gecd::eval
