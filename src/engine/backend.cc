#include "engine/backend.h"

#include <utility>

namespace gecd::engine {

void StepBatch::Clear() {
  tokens.clear();
  block_ids.clear();
  sequences.clear();
}

void StepBatch::Add(std::span<const int32_t> new_tokens, int start_position,
                    std::span<const int32_t> block_table, bool sample, int previous_sample) {
  sequences.push_back({.token_offset = static_cast<int>(tokens.size()),
                       .num_tokens = static_cast<int>(new_tokens.size()),
                       .start_position = start_position,
                       .block_offset = static_cast<int>(block_ids.size()),
                       .num_blocks = static_cast<int>(block_table.size()),
                       .sample = sample,
                       .previous_sample = previous_sample});
  tokens.insert(tokens.end(), new_tokens.begin(), new_tokens.end());
  block_ids.insert(block_ids.end(), block_table.begin(), block_table.end());
}

int StepBatch::num_sampled() const {
  int n = 0;
  for (const BatchSequence& s : sequences) n += s.sample ? 1 : 0;
  return n;
}

absl::Status Backend::Submit(const StepBatch& batch) {
  if (static_cast<int>(pending_.size()) >= max_in_flight()) {
    return absl::FailedPreconditionError("Submit: too many steps in flight; Collect first");
  }
  Pending p;
  p.status = Forward(batch, &p.result);
  if (!p.status.ok()) return p.status;  // nothing queued
  pending_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status Backend::Collect(StepResult* result) {
  if (pending_.empty()) return absl::FailedPreconditionError("Collect: no step in flight");
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  *result = std::move(p.result);
  return p.status;
}

}  // namespace gecd::engine
