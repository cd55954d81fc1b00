#include "server/generator.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "config/engine_options.h"
#include "engine/pipelined_engine.h"
#include "model/checkpoint.h"
#include "spdlog/spdlog.h"

namespace gecd::server {
namespace {

// The model on engine.backend, pipelined. Prompts arrive tokenized with their copy-bias span
// (the workers built them), so the engine process needs no tokenizer.
class ModelGenerator final : public Generator {
 public:
  static absl::StatusOr<std::unique_ptr<ModelGenerator>> Create(const config::Config& config) {
    ASSIGN_OR_RETURN(std::unique_ptr<model::Checkpoint> checkpoint,
                     model::Checkpoint::Open(config.model.dir));
    ASSIGN_OR_RETURN(std::unique_ptr<engine::Backend> backend,
                     config::CreateBackend(config, *checkpoint));
    return std::make_unique<ModelGenerator>(std::move(backend),
                                            config::EngineOptionsFrom(*checkpoint));
  }

  ModelGenerator(std::unique_ptr<engine::Backend> backend, engine::EngineOptions options)
      : engine_(std::move(backend), /*tokenizer=*/nullptr, std::move(options)) {
    if (const std::string what = engine_.backend().Describe(); !what.empty()) {
      spdlog::info("engine backend: {}", what);
    }
  }
  // The CPU cost of a step shows as the backend's idle time between back-to-back steps.
  ~ModelGenerator() override { spdlog::info("engine steps: {}", engine_.Summary()); }

  absl::Status Add(engine::SequenceId id, std::vector<int32_t> prompt,
                   engine::GenerationParams params) override {
    return engine_.Add(id, std::move(prompt), std::move(params));
  }
  bool Free(engine::SequenceId id) override { return engine_.Free(id).ok(); }
  bool HasWork() const override { return engine_.HasWork(); }

  absl::Status Step(StepOutcome* out) override {
    engine::PipelinedEngine::StepOutcome outcome;
    RETURN_IF_ERROR(engine_.Step(&outcome));
    out->ran = std::move(outcome.ran);
    out->events = std::move(outcome.events);
    return absl::OkStatus();
  }

  void PublishGauges(ProcessMetrics& metrics) const override {
    const engine::Engine& e = engine_.engine();
    const int total = e.num_blocks();
    metrics.SetKvCacheUsage(
        total == 0 ? 0.0 : static_cast<double>(total - e.num_free_blocks()) / total);
    metrics.SetQueueDepth(e.num_waiting());
  }

 private:
  engine::PipelinedEngine engine_;
};

// Every sequence's output is its prompt, all of it in the step after it arrived.
class EchoGenerator final : public Generator {
 public:
  absl::Status Add(engine::SequenceId id, std::vector<int32_t> prompt,
                   engine::GenerationParams) override {
    if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
    if (!prompts_.emplace(id, std::move(prompt)).second) {
      return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " is live"));
    }
    return absl::OkStatus();
  }
  bool Free(engine::SequenceId id) override { return prompts_.erase(id) > 0; }
  bool HasWork() const override { return !prompts_.empty(); }

  absl::Status Step(StepOutcome* out) override {
    out->ran.clear();
    out->events.clear();
    for (auto& [id, prompt] : prompts_) {
      out->ran.push_back(id);
      for (size_t i = 0; i < prompt.size(); ++i) {
        const bool last = i + 1 == prompt.size();
        out->events.push_back(
            {.id = id,
             .token = prompt[i],
             .finished = last,
             .reason = last ? engine::FinishReason::kLength : engine::FinishReason::kNone});
      }
    }
    prompts_.clear();
    return absl::OkStatus();
  }

  void PublishGauges(ProcessMetrics& metrics) const override {
    metrics.SetQueueDepth(static_cast<int64_t>(prompts_.size()));
  }

 private:
  absl::flat_hash_map<engine::SequenceId, std::vector<int32_t>> prompts_;
};

absl::Status WarmUp(Generator& generator) {
  constexpr engine::SequenceId kWarmUpId = 0;  // real sequences start at 1
  engine::GenerationParams params;
  params.max_new_tokens = 1;
  RETURN_IF_ERROR(generator.Add(kWarmUpId, {0}, std::move(params)));
  Generator::StepOutcome outcome;
  while (generator.HasWork()) RETURN_IF_ERROR(generator.Step(&outcome));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Generator>> MakeGenerator(const config::Config& config) {
  std::unique_ptr<Generator> generator;
  if (config.engine.backend == "echo") {
    generator = std::make_unique<EchoGenerator>();
  } else if (config.engine.backend == "cpu" || config.engine.backend == "cuda") {
    ASSIGN_OR_RETURN(generator, ModelGenerator::Create(config));
  } else {
    return absl::UnimplementedError(
        absl::StrCat("engine.backend '", config.engine.backend, "' is not available"));
  }
  RETURN_IF_ERROR(WarmUp(*generator));
  return generator;
}

}  // namespace gecd::server
