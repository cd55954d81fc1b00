// The cpu backend's Linear alone, in each precision, on the default model's shapes (hidden 256,
// intermediate 768, 8 heads of 32, 4 KV heads, vocab 8000):
//   BM_Linear/<precision>/<layer>/<rows>   precision 0 f32 (OpenBLAS sgemm), 1 bf16, 2 int8
//                                          (oneDNN); layer 0 qkv [512, 256], 1 o [256, 256],
//                                          2 gate_up [1536, 256], 3 down [256, 768], 4 lm_head
//                                          [8000, 256] -> GFLOP/s (2 · rows · out · in per call)
// as engine::CpuLinear runs them (the bf16 and int8 conversions of the activations and the
// epilogue included). A precision the CPU cannot run (bf16 without AVX512-BF16 or AMX-BF16,
// int8 without VNNI) or a build without oneDNN skips. Threads: OpenBLAS GECD_BENCH_THREADS
// (default 2), oneDNN OMP_NUM_THREADS (default every core); set GOMP_SPINCOUNT=10000 as
// `gecd serve` does for its engine (docs/OPERATIONS.md).
#include <cblas.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/cpu_linear.h"
#include "testing/cpu_features.h"

namespace gecd::engine {
namespace {

struct Shape {
  const char* name;
  int out, in;
};
constexpr Shape kShapes[] = {{"qkv", 512, 256},
                             {"o", 256, 256},
                             {"gate_up", 1536, 256},
                             {"down", 256, 768},
                             {"lm_head", 8000, 256}};

int BenchThreads() {
  const char* env = std::getenv("GECD_BENCH_THREADS");
  return env != nullptr ? std::atoi(env) : 2;
}

void BM_Linear(benchmark::State& state) {
  const int precision = static_cast<int>(state.range(0));
  const Shape shape = kShapes[state.range(1)];
  const int rows = static_cast<int>(state.range(2));
  openblas_set_num_threads(BenchThreads());
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(shape.out) * shape.in);
  for (float& v : w) v = dist(rng);
  std::vector<float> x(static_cast<size_t>(rows) * shape.in);
  for (float& v : x) v = dist(rng) * 20;
  std::vector<float> y(static_cast<size_t>(rows) * shape.out);
  CpuLinear linear = CpuLinear::Dense(std::move(w), shape.out, shape.in);
  if (precision == 1 && !testing::CpuHasBf16()) {
    state.SkipWithError("no AVX512-BF16 or AMX-BF16 here");
    return;
  }
  if (precision > 0) {
    const absl::Status s = linear.ToOneDnn(
        precision == 1 ? cpu_matmul::Precision::kBf16 : cpu_matmul::Precision::kInt8, shape.name,
        rows);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  LinearScratch scratch;
  scratch.Reserve(rows, shape.in, shape.out);
  for (auto _ : state) {
    linear.Apply(x.data(), rows, y.data(), /*accumulate=*/false, &scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * rows * shape.out * shape.in * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
  state.SetLabel(std::string(precision == 0   ? "f32"
                             : precision == 1 ? "bf16"
                                              : "int8") +
                 " " + shape.name + (precision > 0 ? " " + linear.onednn_kernel() : std::string()));
}
BENCHMARK(BM_Linear)
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2, 3, 4}, {2, 8, 32, 128}})
    ->ArgNames({"precision", "layer", "rows"})
    ->UseRealTime();

}  // namespace
}  // namespace gecd::engine

BENCHMARK_MAIN();
