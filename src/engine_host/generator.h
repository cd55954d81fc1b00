#ifndef GECD_ENGINE_HOST_GENERATOR_H_
#define GECD_ENGINE_HOST_GENERATOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/config.h"
#include "engine/engine.h"
#include "metrics/metrics.h"

// What the engine process runs sequences on (engine.backend): the model, pipelined
// (engine::PipelinedEngine over the cpu or cuda backend), or `echo`, which answers every prompt
// with itself so that the daemon's front-end path can be measured without a model (and, with
// engine.echo_step_ms, a slow daemon imitated). The engine process's loop (engine_host::EngineLoop)
// only moves records between the rings and this.
namespace gecd::engine_host {

class Generator {
 public:
  // One step's outcome.
  struct StepOutcome {
    std::vector<engine::SequenceId> ran;      // sequences of the step started now
    std::vector<engine::StepEvent> events;    // tokens of the step finished now
    std::vector<engine::SequenceId> expired;  // dropped unstarted: their deadline passed
    // The step this call's time mostly paid for (the one committed now on a pipelined engine):
    // its sequences, 0 when none, and the positions it computed (prefill chunks count their
    // length), for the engine's step-time fit.
    int timed_sequences = 0;
    int timed_tokens = 0;
    int running = 0;  // sequences started and unfinished once this step is committed
  };

  virtual ~Generator() = default;
  virtual absl::Status Add(engine::SequenceId id, std::vector<int32_t> prompt,
                           engine::GenerationParams params) = 0;
  // False when `id` is not live.
  virtual bool Free(engine::SequenceId id) = 0;
  virtual bool HasWork() const = 0;
  // Runs a step, calling `arrivals` once before the next step is planned: the caller Adds there
  // what arrived since its last call, so that it joins that step (engine::PipelinedEngine::Step).
  virtual absl::Status Step(StepOutcome* out, absl::FunctionRef<void()> arrivals) = 0;
  // The engine's gauges, and its speculative-decoding counters' growth since the last call.
  virtual void PublishGauges(metrics::ProcessMetrics& metrics) = 0;
  // Output tokens a sequence gains per step, on average since the start: 1 without
  // speculative decoding.
  virtual double TokensPerSequenceStep() const { return 1.0; }
};

// engine.backend's generator, loaded (model, weights) and warmed up: one tiny generation has
// run, so the first request does not pay for first-touch page faults and lazily built state.
absl::StatusOr<std::unique_ptr<Generator>> MakeGenerator(const config::Config& config);

}  // namespace gecd::engine_host

#endif  // GECD_ENGINE_HOST_GENERATOR_H_
