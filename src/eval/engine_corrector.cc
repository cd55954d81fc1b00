#include "eval/engine_corrector.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "config/engine_options.h"
#include "model/checkpoint.h"
#include "model/utf8.h"

namespace gecd::eval {

EngineCorrector::EngineCorrector(const config::Config& config, model::PromptTemplate prompt_template,
                                 std::unique_ptr<model::Tokenizer> tokenizer,
                                 std::unique_ptr<model::SpellCorrector> spelling,
                                 std::unique_ptr<engine::CpuBackend> backend,
                                 engine::EngineOptions options)
    : config_(config),
      template_(std::move(prompt_template)),
      tokenizer_(std::move(tokenizer)),
      spelling_(std::move(spelling)),
      backend_(std::move(backend)),
      engine_options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<EngineCorrector>> EngineCorrector::Create(
    const config::Config& config) {
  ASSIGN_OR_RETURN(model::PromptTemplate prompt_template,
                   model::PromptTemplate::Parse(config.model.prompt_template));
  // The checkpoint first: its errors say best what is wrong with a model directory.
  ASSIGN_OR_RETURN(std::unique_ptr<model::Checkpoint> checkpoint,
                   model::Checkpoint::Open(config.model.dir));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> tokenizer,
                   model::Tokenizer::LoadFromModelDir(config.model.dir));
  ASSIGN_OR_RETURN(std::unique_ptr<model::SpellCorrector> spelling,
                   config::SpellCorrectorFrom(config.spelling));
  ASSIGN_OR_RETURN(
      std::unique_ptr<engine::CpuBackend> backend,
      engine::CpuBackend::Create(*checkpoint, config::CpuBackendOptionsFrom(config.engine)));
  return std::unique_ptr<EngineCorrector>(
      new EngineCorrector(config, std::move(prompt_template), std::move(tokenizer),
                          std::move(spelling), std::move(backend),
                          config::EngineOptionsFrom(*checkpoint)));
}

absl::StatusOr<CorrectionRun> EngineCorrector::CorrectAll(const std::vector<std::string>& texts,
                                                          ProgressBar* progress) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  CorrectionRun run;
  run.outputs.assign(texts.size(), "");
  run.errors.assign(texts.size(), "");
  const auto fail = [&](size_t i, std::string message) {
    run.errors[i] = std::move(message);
    ++run.failed;
    if (progress != nullptr) progress->Advance();
  };

  engine::Engine engine(backend_.get(), tokenizer_.get(), engine_options_);
  ASSIGN_OR_RETURN(const config::CopyBiasSetting copy_bias,
                   config::CopyBiasSetting::Create(config_.model.copy_bias, template_,
                                                   *tokenizer_));
  const size_t max_input_tokens = static_cast<size_t>(config_.model.max_input_tokens);
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].empty()) {
      fail(i, "text is empty");
      continue;
    }
    if (absl::Status utf8 = model::ValidateUtf8(texts[i]); !utf8.ok()) {
      fail(i, std::string(utf8.message()));
      continue;
    }
    absl::StatusOr<std::vector<int32_t>> ids =
        tokenizer_->Encode(config::PromptText(template_, spelling_.get(), texts[i]));
    if (!ids.ok()) {
      fail(i, std::string(ids.status().message()));
      continue;
    }
    if (ids->size() > max_input_tokens) {
      fail(i, absl::StrCat("prompt is ", ids->size(), " tokens, more than the limit of ",
                           max_input_tokens, " (model.max_input_tokens)"));
      continue;
    }
    engine::GenerationParams params;
    params.max_new_tokens = config_.model.max_output_tokens;
    copy_bias.Apply(*ids, &params);
    if (absl::Status added = engine.AddSequence(i, *std::move(ids), params); !added.ok()) {
      fail(i, std::string(added.message()));
    }
  }

  std::vector<std::vector<int32_t>> generated(texts.size());
  while (engine.HasWork()) {
    ASSIGN_OR_RETURN(std::vector<engine::StepEvent> events, engine.Step());
    for (const engine::StepEvent& e : events) {
      // A stop token ends the output without being part of it, as in the server.
      if (e.reason != engine::FinishReason::kStopToken) generated[e.id].push_back(e.token);
      if (e.finished) {
        run.generated_tokens += static_cast<int64_t>(generated[e.id].size());
        run.outputs[e.id] = model::ToValidUtf8(tokenizer_->Decode(generated[e.id]));
        if (progress != nullptr) progress->Advance();
      }
    }
  }
  run.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return run;
}

}  // namespace gecd::eval
