#include "engine/backend.h"

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

}  // namespace gecd::engine
