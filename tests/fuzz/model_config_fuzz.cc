// libFuzzer target: config.json and generation_config.json parsing must turn any input into a
// ModelConfig or an error, never a crash, an escaped exception or a runaway regex; an accepted
// config's derived sizes must be consistent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = gecd::model::ParseModelConfig(text, "fuzz/config.json");
  if (config.ok()) {
    if (config->num_attention_heads % config->num_key_value_heads != 0) std::abort();
    if (config->head_dim <= 0 || config->head_dim % 2 != 0) std::abort();
    if (gecd::model::ParameterCount(*config) <= 0) std::abort();
  }
  (void)gecd::model::ParseGenerationConfig(text, "fuzz/generation_config.json");
  return 0;
}
