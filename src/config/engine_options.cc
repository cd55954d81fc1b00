#include "config/engine_options.h"

namespace gecd::config {

engine::CpuBackendOptions CpuBackendOptionsFrom(const EngineSection& engine) {
  return {.kv_block_size = engine.kv_block_size,
          .num_kv_blocks = engine.kv_cache_blocks,
          .kv_cache_mb = engine.kv_cache_mb,
          .max_step_tokens = engine.max_step_tokens,
          .max_batch_size = engine.max_batch_size,
          .threads = engine.threads};
}

}  // namespace gecd::config
