#include "config/engine_options.h"

#include <vector>

namespace gecd::config {

engine::CpuBackendOptions CpuBackendOptionsFrom(const EngineSection& engine) {
  return {.kv_block_size = engine.kv_block_size,
          .num_kv_blocks = engine.kv_cache_blocks,
          .kv_cache_mb = engine.kv_cache_mb,
          .max_step_tokens = engine.max_step_tokens,
          .max_batch_size = engine.max_batch_size,
          .threads = engine.threads};
}

engine::EngineOptions EngineOptionsFrom(const model::Checkpoint& checkpoint) {
  const std::vector<int>& eos = checkpoint.generation_config().eos_token_ids;
  engine::EngineOptions options;
  options.eos_token_ids.assign(eos.begin(), eos.end());
  return options;
}

}  // namespace gecd::config
