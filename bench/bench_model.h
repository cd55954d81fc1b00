#ifndef GECD_BENCH_BENCH_MODEL_H_
#define GECD_BENCH_BENCH_MODEL_H_

#include <string>

#include "model/model_config.h"

// The model shapes the benchmarks run (engine_bench, and the daemon benchmarks through
// write_bench_model) and a fast writer of random bf16 checkpoints of them.
namespace gecd {

struct Shape {
  std::string name;
  model::Architecture arch;
  int vocab, hidden, layers, heads, kv_heads, inter;
  bool llama3_rope;
};

// "llama1b" (Llama-3.2-1B), "qwen05b" (Qwen2.5-0.5B); anything else is "tiny", the ~9M shape of
// testing::BenchmarkModelOptions().
Shape ShapeFor(const std::string& name);

// Writes config.json and model.safetensors of `shape` with `layers` layers into `dir`: bf16
// xorshift weights, rows scaled 1/sqrt(in) with spread magnitudes, tied embeddings, no EOS id.
// Writing 1B parameters through the tests' Gaussian generator would take minutes; this takes
// seconds. False when a file cannot be written.
bool WriteBenchCheckpoint(const Shape& shape, int layers, const std::string& dir);

}  // namespace gecd

#endif  // GECD_BENCH_BENCH_MODEL_H_
