#ifndef GECD_ENGINE_PIPELINED_ENGINE_H_
#define GECD_ENGINE_PIPELINED_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "engine/backend.h"
#include "engine/compute_thread.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace gecd::engine {

// The Engine over a model backend with its phases overlapped: each Step() plans step N+1
// while step N computes, starts N+1 as soon as N is done, and only then commits N, so the
// caller's work between steps (committing, ring I/O, detokenizing) runs while the backend
// computes. A synchronous backend computes on a ComputeThread; an asynchronous one (a device
// queue) gets N+1 submitted before N is collected. The outputs are token for token those of
// Engine::Step(). With speculative decoding, drafts follow the committed output, so each
// Step() commits the step in flight before it plans the next (the caller's work between steps
// still overlaps the step it started). Owns the backend, the engine and the compute thread.
// Not thread-safe.
class PipelinedEngine {
 public:
  struct StepOutcome {
    std::vector<SequenceId> ran;      // the sequences of the step started now
    std::vector<StepEvent> events;    // those of the step committed now
    std::vector<SequenceId> expired;  // dropped unstarted at their deadline (Engine::TakeExpired)
    // The size of the step committed now: the one whose compute this call waited for, so what
    // the call's time mostly paid for (0 sequences when none was committed).
    int committed_sequences = 0;
    int committed_tokens = 0;  // positions computed: one per decode, a prefill chunk's length
  };

  // `tokenizer` may be null (then stop strings are rejected); it must outlive the engine.
  PipelinedEngine(std::unique_ptr<Backend> backend, const model::Tokenizer* tokenizer,
                  EngineOptions options);
  PipelinedEngine(const PipelinedEngine&) = delete;
  PipelinedEngine& operator=(const PipelinedEngine&) = delete;

  // As Engine::AddSequence and Engine::Free.
  absl::Status Add(SequenceId id, std::vector<int32_t> prompt, GenerationParams params) {
    return engine_.AddSequence(id, std::move(prompt), std::move(params));
  }
  absl::Status Free(SequenceId id) { return engine_.Free(id); }

  // Sequences left to run, or a step still to commit.
  bool HasWork() const { return engine_.HasWork() || in_flight_ != nullptr; }
  // One pipeline turn (see the class comment). A backend error is returned as is; the engine
  // is then unusable.
  absl::Status Step(StepOutcome* out) {
    return Step(out, [] {});
  }
  // The same, calling `arrivals` once, just before the next step is planned, for the caller to
  // Add (or Free) what came in while the step in flight computed: with drafts the turn waits
  // for that step before planning the next, and a sequence added after the turn returns would
  // miss the step planned in it and wait a whole step more (a closed loop of 8 clients on a
  // 2-core CPU: 2.5 steps from arrival to first token, session 33). `arrivals` must not call
  // Step.
  absl::Status Step(StepOutcome* out, absl::FunctionRef<void()> arrivals);

  const Engine& engine() const { return engine_; }
  // How the backend's time went: the compute thread's busy and idle time, or a device queue's
  // own counters (Backend::StatsSummary).
  std::string Summary() {
    return backend_->asynchronous() ? backend_->StatsSummary() : compute_.Summary();
  }
  const Backend& backend() const { return *backend_; }

 private:
  absl::Status StepOnDeviceQueue(StepOutcome* out);
  absl::Status StepCommitFirst(StepOutcome* out, absl::FunctionRef<void()> arrivals);
  // Commits `plan`'s step into `out` (its events and its size).
  void Commit(const StepPlan& plan, const StepResult& result, StepOutcome* out);

  std::unique_ptr<Backend> backend_;
  Engine engine_;
  StepResult results_[2];
  int slot_ = 0;
  const StepPlan* in_flight_ = nullptr;  // started, not committed
  ComputeThread compute_;                // last: joined first, before what its step uses goes
};

}  // namespace gecd::engine

#endif  // GECD_ENGINE_PIPELINED_ENGINE_H_
