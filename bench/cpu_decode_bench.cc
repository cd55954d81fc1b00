// CPU engine throughput on the ~10M-parameter benchmark model (hidden 256, 6 layers,
// intermediate 768, vocab 8000, 8 heads, 4 kv heads; random weights written to a temp dir,
// which is removed once the backend is built):
//   BM_DecodeStep/B    one decode step of B sequences at context 51 -> tokens/s
//   BM_Requests/N      N requests of 50 prompt + 50 generated tokens (EOS ignored) through the
//                      Engine, continuous batching included -> requests/s
// OpenBLAS uses GECD_BENCH_THREADS threads (default 2, the deployment target).

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "benchmark/benchmark.h"
#include "common/status_macros.h"
#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "testing/random_model.h"
#include "testing/scoped_temp_dir.h"

namespace gecd::engine {
namespace {

constexpr int kPromptTokens = 50;
constexpr int kNewTokens = 50;

int BenchThreads() {
  const char* env = std::getenv("GECD_BENCH_THREADS");
  return env != nullptr ? std::atoi(env) : 2;
}

// Writes the random benchmark model to a temp dir and builds a backend from it. The backend
// converts every weight at Create and keeps no file open, so the ~20 MB model is removed as soon
// as this returns rather than left behind by every run.
absl::StatusOr<std::unique_ptr<CpuBackend>> BuildBackend() {
  const gecd::testing::ScopedTempDir dir;
  RETURN_IF_ERROR(
      gecd::testing::WriteRandomModel(dir.path(), gecd::testing::BenchmarkModelOptions()));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Checkpoint> checkpoint,
                   model::Checkpoint::Open(dir.path()));
  return CpuBackend::Create(*checkpoint, {.kv_cache_mb = 256,
                                          .max_step_tokens = 2048,
                                          .max_batch_size = 128,
                                          .threads = BenchThreads()});
}

// One backend for the whole run; building it (writing and converting 10M weights) is slow.
CpuBackend* SharedBackend() {
  static CpuBackend* backend = [] {
    auto built = BuildBackend();
    if (!built.ok()) {
      std::fprintf(stderr, "benchmark backend: %s\n", built.status().ToString().c_str());
      std::abort();
    }
    return built->release();
  }();
  return backend;
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int32_t> dist(3, vocab - 1);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

void BM_DecodeStep(benchmark::State& state) {
  CpuBackend* backend = SharedBackend();
  const int batch = static_cast<int>(state.range(0));
  const int vocab = backend->config().vocab_size;
  KvBlockPool pool(backend->kv_layout().num_blocks, backend->kv_layout().block_size);
  std::vector<BlockTable> tables;
  std::mt19937 rng(1);
  StepResult result;
  // Prefill every sequence's prompt, a few per step.
  for (int s = 0; s < batch; ++s) {
    tables.emplace_back(&pool);
    tables.back().Reserve(kPromptTokens + 1);
  }
  for (int s = 0; s < batch; s += 16) {
    StepBatch prefill;
    for (int k = s; k < std::min(batch, s + 16); ++k) {
      prefill.Add(RandomTokens(rng, kPromptTokens, vocab), 0, tables[k].blocks(), true);
    }
    if (!backend->Forward(prefill, &result).ok()) state.SkipWithError("prefill failed");
  }
  // Every step decodes position 50 again, so the context stays at 51 however long it runs.
  StepBatch decode;
  for (int s = 0; s < batch; ++s) {
    decode.Add(std::vector<int32_t>{3 + s % (vocab - 3)}, kPromptTokens, tables[s].blocks(), true);
  }
  for (auto _ : state) {
    if (!backend->Forward(decode, &result).ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(result.next_tokens.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(batch) * state.iterations(),
                                                  benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeStep)
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Arg(64)
    ->Arg(128)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_Requests(benchmark::State& state) {
  CpuBackend* backend = SharedBackend();
  const int requests = static_cast<int>(state.range(0));
  std::mt19937 rng(2);
  GenerationParams params;
  params.max_new_tokens = kNewTokens;
  params.ignore_eos = true;
  int64_t generated = 0;
  for (auto _ : state) {
    Engine engine(backend, nullptr, {});
    for (int r = 0; r < requests; ++r) {
      const absl::Status added = engine.AddSequence(
          r, RandomTokens(rng, kPromptTokens, backend->config().vocab_size), params);
      if (!added.ok()) state.SkipWithError("AddSequence failed");
    }
    while (engine.HasWork()) {
      auto events = engine.Step();
      if (!events.ok()) {
        state.SkipWithError("step failed");
        break;
      }
      generated += static_cast<int64_t>(events->size());
    }
  }
  state.counters["requests/s"] = benchmark::Counter(
      static_cast<double>(requests) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["gen_tokens/s"] =
      benchmark::Counter(static_cast<double>(generated), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Requests)->Arg(128)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace
}  // namespace gecd::engine

BENCHMARK_MAIN();
