#include "engine_host/generator.h"

#include <chrono>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/startup_phases.h"
#include "common/status_macros.h"
#include "engine/pipelined_engine.h"
#include "engine_options/engine_options.h"
#include "model/checkpoint.h"
#include "spdlog/spdlog.h"

namespace gecd::engine_host {
namespace {

// The model on engine.backend, pipelined. Prompts arrive tokenized with their copy-bias span
// (the workers built them), so the engine process needs no tokenizer.
class ModelGenerator final : public Generator {
 public:
  static absl::StatusOr<std::unique_ptr<ModelGenerator>> Create(const config::Config& config) {
    ASSIGN_OR_RETURN(std::unique_ptr<model::Checkpoint> checkpoint,
                     model::Checkpoint::Open(config.model.dir));
    ProcessStartup().Mark("model open");
    // The backend marks its own phases within (weights, quantization, graphs) where it has them.
    ASSIGN_OR_RETURN(std::unique_ptr<engine::Backend> backend,
                     config::CreateBackend(config, *checkpoint));
    ProcessStartup().Mark("backend");
    if (config.engine.backend == "cpu") {
      spdlog::info("engine: {}", config::DescribeComputeThreads(config.engine));
    }
    return std::make_unique<ModelGenerator>(std::move(backend),
                                            config::EngineOptionsFrom(*checkpoint, config.engine));
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

  absl::Status Step(StepOutcome* out, absl::FunctionRef<void()> arrivals) override {
    engine::PipelinedEngine::StepOutcome outcome;
    RETURN_IF_ERROR(engine_.Step(&outcome, arrivals));
    out->ran = std::move(outcome.ran);
    out->events = std::move(outcome.events);
    out->expired = std::move(outcome.expired);
    out->timed_sequences = outcome.committed_sequences;
    out->timed_tokens = outcome.committed_tokens;
    out->running = engine_.engine().num_running();
    return absl::OkStatus();
  }

  void PublishGauges(metrics::ProcessMetrics& metrics) override {
    const engine::Engine& e = engine_.engine();
    const int total = e.num_blocks();
    metrics.SetKvCacheUsage(total == 0 ? 0.0
                                       : static_cast<double>(total - e.num_free_blocks()) / total);
    metrics.SetQueueDepth(e.num_waiting());
    if (!e.speculates()) return;
    const engine::SpeculationStats& now = e.speculation();
    metrics.AddSpeculativeTokens(now.accepted - published_.accepted,
                                 now.rejected - published_.rejected);
    published_.emitted.resize(now.emitted.size());
    for (size_t n = 1; n < now.emitted.size(); ++n) {
      for (int64_t k = published_.emitted[n]; k < now.emitted[n]; ++k) {
        metrics.ObserveTokensPerSequenceStep(static_cast<int>(n));
      }
    }
    published_ = now;
  }

  // Each sequence-step emits its accepted drafts and the model's own token. Since the start,
  // not recent steps: acceptance is the workload's (how much of the input the output copies),
  // which a pod's traffic keeps.
  double TokensPerSequenceStep() const override {
    const engine::SpeculationStats& s = engine_.engine().speculation();
    if (!engine_.engine().speculates() || s.sequence_steps == 0) return 1.0;
    return static_cast<double>(s.sequence_steps + s.accepted) /
           static_cast<double>(s.sequence_steps);
  }

 private:
  engine::SpeculationStats published_;  // the counters PublishGauges last published
  engine::PipelinedEngine engine_;
};

// Every sequence's output is its prompt, all of it in one step: the first step after it
// arrived with room for it. A step runs at most max_batch_size sequences, oldest first, and,
// with a step delay, sleeps that long, so that the daemon behaves like a slowed batching
// engine (higher latency, at most max_batch_size answers per delay).
class EchoGenerator final : public Generator {
 public:
  EchoGenerator(int max_batch_size, std::chrono::milliseconds step_delay)
      : max_batch_size_(max_batch_size), step_delay_(step_delay) {}

  absl::Status Add(engine::SequenceId id, std::vector<int32_t> prompt,
                   engine::GenerationParams) override {
    if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
    if (!prompts_.emplace(id, std::move(prompt)).second) {
      return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " is live"));
    }
    order_.push_back(id);
    return absl::OkStatus();
  }
  // Its place in order_ is skipped when reached (or dropped with the rest once none is live).
  bool Free(engine::SequenceId id) override {
    if (prompts_.erase(id) == 0) return false;
    if (prompts_.empty()) order_.clear();
    return true;
  }
  bool HasWork() const override { return !prompts_.empty(); }

  absl::Status Step(StepOutcome* out, absl::FunctionRef<void()> arrivals) override {
    out->ran.clear();
    out->events.clear();
    arrivals();
    while (!order_.empty() && static_cast<int>(out->ran.size()) < max_batch_size_) {
      const engine::SequenceId id = order_.front();
      order_.pop_front();
      auto it = prompts_.find(id);
      if (it == prompts_.end()) continue;  // freed
      out->ran.push_back(id);
      const std::vector<int32_t>& prompt = it->second;
      for (size_t i = 0; i < prompt.size(); ++i) {
        const bool last = i + 1 == prompt.size();
        out->events.push_back(
            {.id = id,
             .token = prompt[i],
             .finished = last,
             .reason = last ? engine::FinishReason::kLength : engine::FinishReason::kNone});
      }
      prompts_.erase(it);
    }
    if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
    out->timed_sequences = out->timed_tokens = static_cast<int>(out->ran.size());
    return absl::OkStatus();
  }

  void PublishGauges(metrics::ProcessMetrics& metrics) override {
    metrics.SetQueueDepth(static_cast<int64_t>(prompts_.size()));
  }

 private:
  const int max_batch_size_;
  const std::chrono::milliseconds step_delay_;
  absl::flat_hash_map<engine::SequenceId, std::vector<int32_t>> prompts_;
  std::deque<engine::SequenceId> order_;  // arrival order; may hold freed ids
};

// Runs the model before the daemon is ready, so that the first requests do not pay for what
// first steps do: page faults on the weights, BLAS and CUDA initialisation, kernel loading, and
// on cuda the capture of each decode graph (one step of each graph's batch size, of one-token
// prompts, which the backend runs as decode rows). Warm-up ids are far above the engine loop's,
// which count up from 1, and every warm-up sequence has finished when this returns.
absl::Status WarmUp(Generator& generator, const std::vector<int>& graph_batch_sizes) {
  constexpr engine::SequenceId kFirstWarmUpId = engine::SequenceId{1} << 62;
  engine::SequenceId next = kFirstWarmUpId;
  auto run = [&](int sequences) -> absl::Status {
    for (int i = 0; i < sequences; ++i) {
      engine::GenerationParams params;
      params.max_new_tokens = 1;
      RETURN_IF_ERROR(generator.Add(next++, {0}, std::move(params)));
    }
    Generator::StepOutcome outcome;
    while (generator.HasWork()) RETURN_IF_ERROR(generator.Step(&outcome, [] {}));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(run(1));
  ProcessStartup().Mark("warm-up");
  if (graph_batch_sizes.empty()) return absl::OkStatus();
  for (int b : graph_batch_sizes) RETURN_IF_ERROR(run(b));
  ProcessStartup().Mark("graph capture");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Generator>> MakeGenerator(const config::Config& config) {
  std::unique_ptr<Generator> generator;
  if (config.engine.backend == "echo") {
    generator = std::make_unique<EchoGenerator>(
        config.engine.max_batch_size, std::chrono::milliseconds(config.engine.echo_step_ms));
  } else if (config.engine.backend == "cpu" || config.engine.backend == "cuda") {
    ASSIGN_OR_RETURN(generator, ModelGenerator::Create(config));
  } else {
    return absl::UnimplementedError(
        absl::StrCat("engine.backend '", config.engine.backend, "' is not available"));
  }
  std::vector<int> graphs;
  if (config.engine.backend == "cuda") {
    for (int b : config::GraphBatchSizes(config.engine)) {
      if (b <= config.engine.max_batch_size) graphs.push_back(b);
    }
  }
  RETURN_IF_ERROR(WarmUp(*generator, graphs));
  return generator;
}

}  // namespace gecd::engine_host
