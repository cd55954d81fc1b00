#include "engine/pipelined_engine.h"

#include <utility>

#include "common/status_macros.h"

namespace gecd::engine {

PipelinedEngine::PipelinedEngine(std::unique_ptr<Backend> backend,
                                 const model::Tokenizer* tokenizer, EngineOptions options)
    : backend_(std::move(backend)),
      engine_(backend_.get(), tokenizer, std::move(options)),
      compute_(backend_.get()) {}

absl::Status PipelinedEngine::Step(StepOutcome* out, absl::FunctionRef<void()> arrivals) {
  out->ran.clear();
  out->events.clear();
  out->committed_sequences = out->committed_tokens = 0;
  if (engine_.speculates()) return StepCommitFirst(out, arrivals);
  // Without drafts the next step is planned before this turn waits: arrivals now.
  arrivals();
  if (backend_->asynchronous()) return StepOnDeviceQueue(out);
  const StepPlan& next = engine_.PlanStep();
  out->expired = engine_.TakeExpired();
  const StepPlan* previous = in_flight_;
  if (previous != nullptr) RETURN_IF_ERROR(compute_.Wait());
  in_flight_ = nullptr;
  if (!next.empty()) {
    // The in-flight step's result is results_[slot_]; the next one goes to the other.
    compute_.Dispatch(&next.batch, &results_[slot_ ^ 1], /*back_to_back=*/previous != nullptr);
    in_flight_ = &next;
    out->ran = next.ids;
  }
  if (previous != nullptr) Commit(*previous, results_[slot_], out);
  if (in_flight_ != nullptr) slot_ ^= 1;
  return absl::OkStatus();
}

absl::Status PipelinedEngine::StepCommitFirst(StepOutcome* out,
                                              absl::FunctionRef<void()> arrivals) {
  const bool back_to_back = in_flight_ != nullptr;
  if (in_flight_ != nullptr) {
    RETURN_IF_ERROR(backend_->asynchronous() ? backend_->Collect(&results_[0]) : compute_.Wait());
    Commit(*in_flight_, results_[0], out);
    in_flight_ = nullptr;
  }
  arrivals();
  const StepPlan& next = engine_.PlanStep();
  out->expired = engine_.TakeExpired();
  if (next.empty()) return absl::OkStatus();
  if (backend_->asynchronous()) {
    RETURN_IF_ERROR(backend_->Submit(next.batch));
  } else {
    compute_.Dispatch(&next.batch, &results_[0], back_to_back);
  }
  in_flight_ = &next;
  out->ran = next.ids;
  return absl::OkStatus();
}

absl::Status PipelinedEngine::StepOnDeviceQueue(StepOutcome* out) {
  const StepPlan& next = engine_.PlanStep();
  out->expired = engine_.TakeExpired();
  const StepPlan* previous = in_flight_;
  in_flight_ = nullptr;
  if (!next.empty()) {
    RETURN_IF_ERROR(backend_->Submit(next.batch));
    in_flight_ = &next;
    out->ran = next.ids;
  }
  if (previous != nullptr) {
    RETURN_IF_ERROR(backend_->Collect(&results_[0]));
    Commit(*previous, results_[0], out);
  }
  return absl::OkStatus();
}

void PipelinedEngine::Commit(const StepPlan& plan, const StepResult& result, StepOutcome* out) {
  out->events = engine_.CommitStep(plan, result);
  out->committed_sequences = static_cast<int>(plan.ids.size());
  out->committed_tokens = plan.batch.num_tokens();
}

}  // namespace gecd::engine
