#ifndef GECD_TESTS_TESTING_RANDOM_MODEL_H_
#define GECD_TESTS_TESTING_RANDOM_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "model/model_config.h"
#include "model/safetensors.h"

// Small random-weight models in Hugging Face layout (config.json, generation_config.json,
// model.safetensors or shards + index), so tests and benchmarks need no downloaded checkpoint.
// The same options and seed always give the same bytes.
namespace gecd::testing {

struct RandomModelOptions {
  model::Architecture architecture = model::Architecture::kLlama;
  int vocab_size = 128;
  int hidden_size = 32;
  int intermediate_size = 64;
  int num_layers = 2;
  int num_heads = 4;
  int num_kv_heads = 2;
  int head_dim = 0;  // 0: hidden_size / num_heads, and config.json omits it
  int max_position_embeddings = 512;
  float rope_theta = 10000.0f;
  bool llama3_rope_scaling = false;  // rope_scaling {type llama3, factor 8, low 1, high 4}
  bool tie_word_embeddings = false;
  model::DType dtype = model::DType::kF32;  // F32, BF16 or F16
  int num_shards = 1;                       // > 1: model-0000N-of-0000M.safetensors with an index
  uint64_t seed = 0;
};

// The ~10M-parameter shape the CPU decode benchmark uses: hidden 256, 6 layers, intermediate 768,
// vocab 8000, 8 heads, 4 kv heads.
RandomModelOptions BenchmarkModelOptions();

// Writes the model into `dir` (created if needed). Linear rows get different magnitudes and
// norms differ from 1, so per-channel effects (FP8 scales, RMSNorm weights) are visible.
absl::Status WriteRandomModel(const std::string& dir, const RandomModelOptions& options);

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_RANDOM_MODEL_H_
