#include "fleet_sim/sim_pod.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gecd::fleet_sim {

namespace {

absl::Status OutOfRange(const char* field, double value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("pod model: ", field, " is ", value, ", want ", want));
}

}  // namespace

absl::Status PodModel::Validate() const {
  if (!(step_fixed_s >= 0) || !std::isfinite(step_fixed_s)) {
    return OutOfRange("step_fixed_s", step_fixed_s, ">= 0");
  }
  if (!(decode_token_s >= 0) || !std::isfinite(decode_token_s)) {
    return OutOfRange("decode_token_s", decode_token_s, ">= 0");
  }
  if (!(prompt_token_s >= 0) || !std::isfinite(prompt_token_s)) {
    return OutOfRange("prompt_token_s", prompt_token_s, ">= 0");
  }
  if (!(StepTime(1, 0) > 0)) return OutOfRange("step_fixed_s", step_fixed_s, "a step time > 0");
  if (max_batch < 1) return OutOfRange("max_batch", max_batch, ">= 1");
  if (steps_per_request < 1) return OutOfRange("steps_per_request", steps_per_request, ">= 1");
  if (prompt_tokens < 1) return OutOfRange("prompt_tokens", prompt_tokens, ">= 1");
  const double joiners = static_cast<double>(max_batch) / steps_per_request;
  const double tokens = max_batch - joiners + joiners * prompt_tokens;
  if (max_step_tokens < prompt_tokens || max_step_tokens < std::ceil(tokens)) {
    return OutOfRange(
        "max_step_tokens", max_step_tokens,
        absl::StrCat(">= a full batch's steady-state step (", std::ceil(tokens), " tokens)"));
  }
  return absl::OkStatus();
}

double PodModel::StepTime(int decodes, int joiners) const {
  return step_fixed_s + decode_token_s * decodes +
         prompt_token_s * static_cast<double>(joiners) * prompt_tokens;
}

double PodModel::Capacity() const {
  const double joiners = static_cast<double>(max_batch) / steps_per_request;
  const double step = step_fixed_s + decode_token_s * (max_batch - joiners) +
                      prompt_token_s * joiners * prompt_tokens;
  return joiners / step;
}

PodModel PodModel::Scaled(double factor) const {
  PodModel scaled = *this;
  scaled.step_fixed_s *= factor;
  scaled.decode_token_s *= factor;
  scaled.prompt_token_s *= factor;
  return scaled;
}

PodModel CpuCalibratedPodModel() {
  PodModel model;
  // Least-squares line through cpu_decode_bench's decode steps at batch 1, 8, 32, 64 and 128
  // (2.97, 4.68, 9.81, 15.9, 33.4 ms, 2 threads, context 51).
  model.step_fixed_s = 2.318e-3;
  model.decode_token_s = 0.2368e-3;
  // engine_bench's 128 requests in 2.706 s (47.3 req/s) less their 49 decode steps at batch
  // 128 by the line above (1.599 s), over their 128 * 50 prompt tokens.
  model.prompt_token_s = 0.173e-3;
  model.max_batch = 128;         // configs/gecd.yaml engine.max_batch_size
  model.max_step_tokens = 2048;  // engine.max_step_tokens
  model.steps_per_request = 50;  // 50 generated tokens: the prefill step's and 49 decodes
  model.prompt_tokens = 50;
  return model;
}

SimPod::SimPod(const PodModel& model, double slowdown) : model_(model), slowdown_(slowdown) {}

bool SimPod::Enqueue(const SimRequest& request, double now) {
  waiting_.push_back(request);
  if (busy_) return false;
  StartStep(now);
  return true;
}

bool SimPod::EndStep(std::vector<SimRequest>* done) {
  ++steps_done_;
  while (!running_.empty() && running_.front().finish_step == steps_done_) {
    done->push_back(running_.front().request);
    running_.pop_front();
  }
  if (running_.empty() && waiting_.empty()) {
    busy_ = false;
    return false;
  }
  StartStep(step_end_);
  return true;
}

void SimPod::StartStep(double now) {
  // As the engine plans a step: every running sequence decodes one token, then queued
  // requests join, whole prompts, while the batch and the token budget allow.
  const int decodes = static_cast<int>(running_.size());
  int budget = model_.max_step_tokens - decodes;
  int joiners = 0;
  while (!waiting_.empty() && static_cast<int>(running_.size()) < model_.max_batch &&
         budget >= model_.prompt_tokens) {
    running_.push_back({steps_done_ + model_.steps_per_request, waiting_.front()});
    waiting_.pop_front();
    budget -= model_.prompt_tokens;
    ++joiners;
  }
  batched_sequences_ += running_.size();
  busy_ = true;
  step_end_ = now + slowdown_ * model_.StepTime(decodes, joiners);
}

}  // namespace gecd::fleet_sim
