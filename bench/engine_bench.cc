// engine_bench: the Engine in-process (no RPC) on random-weight models shaped like
// Llama-3.2-1B and Qwen2.5-0.5B, synthetic requests of --prompt prompt + --gen generated tokens
// (ignore_eos). One table row per model × configuration:
//   - saturation: --requests submitted at once; requests/s, tokens/s, achieved TFLOP/s and
//     bytes/s (weights + KV read per step) against the H200 ceilings (--peak_tflops,
//     --peak_tbps);
//   - latency: Poisson arrivals at --rate for --poisson_seconds; p50 / p99 request latency;
//   - device counters of the cuda backend: graph steps, idle time between steps.
// Configurations (--rows, comma-separated): QUANT:gGaA[c1] with QUANT in bf16 | fp8 |
// fp8attnbf16 | fp8tensor, G = graphs on (1) / off (0), A = async pipelined Submit/Collect (1)
// or synchronous Forward (0), c1 = the default config's copy bias (2, over the whole prompt).
// Without a CUDA device (or in a CPU-only build) it runs --models tiny on the cpu backend, so it is
// testable anywhere.
//
//   build/bench/engine_bench                                  # defaults, every row
//   build/bench/engine_bench --models=llama1b --rows=fp8:g1a1 --requests=4096 --rate=3000
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench_model.h"
#include "common/numerics.h"
#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"
#include "testing/random_model.h"
#include "testing/scoped_temp_dir.h"
#ifdef GECD_HAVE_CUDA
#include "cuda_backend/cuda_backend.h"
#include "kernels/cuda_util.h"
#endif

namespace gecd {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Flags {
  std::string models;  // default depends on the backend
  std::string rows = "bf16:g1a1,fp8:g1a1,fp8attnbf16:g1a1,fp8:g0a1,fp8:g1a0,fp8:g0a0,fp8:g1a1c1";
  std::string backend;  // cuda | cpu; default: cuda when a device is visible
  int requests = -1;
  double rate = -1;
  double poisson_seconds = 2.0;
  int prompt = 50;
  int gen = 50;
  int warmup = 256;
  int layers = 0;  // > 0: override the layer count (quick runs)
  int max_step_tokens = 8192;
  int max_batch_size = 512;
  double kv_fraction = 0.5;
  double peak_tflops = 790.0;
  double peak_tbps = 4.3;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "engine_bench [--name=value]...\n"
          "  --models=llama1b,qwen05b | tiny     shapes (default: both on cuda, tiny on cpu)\n"
          "  --rows=QUANT:gGaA[c1],...            QUANT bf16|fp8|fp8attnbf16|fp8tensor, G graphs,\n"
          "                                       A async, c1 copy bias 2 (default %s)\n"
          "  --backend=cuda|cpu  --requests=N (saturation, default 2048)  --rate=R (Poisson\n"
          "  req/s, default 3000)  --poisson_seconds=S (2)  --prompt=50  --gen=50  --warmup=256\n"
          "  --layers=L (override)  --max_step_tokens=8192  --max_batch_size=512\n"
          "  --kv_fraction=0.5  --peak_tflops=790  --peak_tbps=4.3\n",
          f->rows.c_str());
      std::exit(0);
    }
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "bad flag %s (use --name=value)\n", a.c_str());
      return false;
    }
    const std::string k = a.substr(2, eq - 2), v = a.substr(eq + 1);
    if (k == "models") f->models = v;
    else if (k == "rows") f->rows = v;
    else if (k == "backend") f->backend = v;
    else if (k == "requests") f->requests = std::stoi(v);
    else if (k == "rate") f->rate = std::stod(v);
    else if (k == "poisson_seconds") f->poisson_seconds = std::stod(v);
    else if (k == "prompt") f->prompt = std::stoi(v);
    else if (k == "gen") f->gen = std::stoi(v);
    else if (k == "warmup") f->warmup = std::stoi(v);
    else if (k == "layers") f->layers = std::stoi(v);
    else if (k == "max_step_tokens") f->max_step_tokens = std::stoi(v);
    else if (k == "max_batch_size") f->max_batch_size = std::stoi(v);
    else if (k == "kv_fraction") f->kv_fraction = std::stod(v);
    else if (k == "peak_tflops") f->peak_tflops = std::stod(v);
    else if (k == "peak_tbps") f->peak_tbps = std::stod(v);
    else {
      std::fprintf(stderr, "unknown flag --%s\n", k.c_str());
      return false;
    }
  }
  return true;
}

// FLOPs and bytes one step moves (weights once, K/V of every context read once).
struct Cost {
  double flops = 0, bytes = 0;
};
Cost StepCost(const model::ModelConfig& c, const engine::StepBatch& b, double attn_weight_bytes,
              double mlp_weight_bytes) {
  const double hd = c.head_dim, q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  const double h = c.hidden_size, inter = c.intermediate_size, L = c.num_hidden_layers;
  const double linear_params = h * (q + 2 * kv) + q * h + 3 * h * inter;
  Cost cost;
  const double T = b.num_tokens(), B = b.num_sampled();
  cost.flops = 2 * T * L * linear_params + 2 * B * h * c.vocab_size;
  double kv_read = 0;
  for (const engine::BatchSequence& s : b.sequences) {
    for (int i = 0; i < s.num_tokens; ++i) {
      cost.flops += 4.0 * (s.start_position + i + 1) * c.num_attention_heads * hd * L;
    }
    kv_read += (s.start_position + s.num_tokens) * kv * 2 * 2 * L;  // K and V, bf16
  }
  const double attn_params = h * (q + 2 * kv) + q * h, mlp_params = 3 * h * inter;
  cost.bytes = L * (attn_params * attn_weight_bytes + mlp_params * mlp_weight_bytes) +
               2.0 * h * c.vocab_size + kv_read;
  return cost;
}

struct RunResult {
  bool ok = false;  // every request finished without a step error
  double wall_s = 0;
  int completed = 0;
  int64_t steps = 0;
  int64_t generated = 0;
  Cost cost;
  std::vector<double> latency_ms;
};

struct Row {
  std::string quant;
  bool graphs = true, async = true;
  bool copy = false;  // copy bias 2 over the prompt, as configs/gecd.yaml decodes
};

// Drives an Engine until every request finished. arrivals: seconds from the start (sorted);
// row.async: Submit(N+1) before Collect(N) + CommitStep(N), as the engine process does.
RunResult Drive(engine::Backend& backend, const std::vector<double>& arrivals, int prompt_len,
                int gen_len, const Row& row, double attn_wb, double mlp_wb, uint64_t seed) {
  const bool pipelined = row.async;
  RunResult r;
  const model::ModelConfig& c = backend.config();
  engine::Engine eng(&backend, nullptr, {});
  std::mt19937_64 rng(seed);
  const int n = static_cast<int>(arrivals.size());
  std::vector<Clock::time_point> finished(n);
  std::vector<bool> done(n, false);
  engine::GenerationParams params;
  params.max_new_tokens = gen_len;
  params.ignore_eos = true;
  if (row.copy) {
    params.copy_bias = 2;
    params.copy_end = prompt_len;
  }
  const auto start = Clock::now();
  int next = 0;
  engine::StepResult result;
  const engine::StepPlan* in_flight = nullptr;
  auto commit = [&](const engine::StepPlan& plan) {
    for (const engine::StepEvent& e : eng.CommitStep(plan, result)) {
      ++r.generated;
      if (e.finished && !done[e.id]) {
        done[e.id] = true;
        finished[e.id] = Clock::now();
        ++r.completed;
      }
    }
  };
  while (r.completed < n) {
    const double now = Seconds(start, Clock::now());
    while (next < n && arrivals[next] <= now) {
      std::vector<int32_t> prompt(prompt_len);
      for (int32_t& t : prompt) t = 3 + static_cast<int32_t>(rng() % (c.vocab_size - 3));
      const absl::Status st = eng.AddSequence(next, std::move(prompt), params);
      if (!st.ok()) {
        std::fprintf(stderr, "AddSequence: %s\n", std::string(st.message()).c_str());
        return r;
      }
      ++next;
    }
    if (!eng.HasWork() && in_flight == nullptr) {
      if (next < n) std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    const engine::StepPlan& plan = eng.PlanStep();
    const engine::StepPlan* dispatched = nullptr;
    if (!plan.empty()) {
      const Cost cost = StepCost(c, plan.batch, attn_wb, mlp_wb);
      r.cost.flops += cost.flops;
      r.cost.bytes += cost.bytes;
      ++r.steps;
      const absl::Status st =
          pipelined ? backend.Submit(plan.batch) : backend.Forward(plan.batch, &result);
      if (!st.ok()) {
        std::fprintf(stderr, "step: %s\n", std::string(st.message()).c_str());
        return r;
      }
      dispatched = &plan;
    }
    if (!pipelined) {
      if (dispatched != nullptr) commit(*dispatched);
      continue;
    }
    if (in_flight != nullptr) {
      const absl::Status st = backend.Collect(&result);
      if (!st.ok()) {
        std::fprintf(stderr, "collect: %s\n", std::string(st.message()).c_str());
        return r;
      }
      commit(*in_flight);
    }
    in_flight = dispatched;
  }
  r.ok = true;
  r.wall_s = Seconds(start, Clock::now());
  for (int i = 0; i < n; ++i) {
    r.latency_ms.push_back(1e3 * (Seconds(start, finished[i]) - arrivals[i]));
  }
  std::sort(r.latency_ms.begin(), r.latency_ms.end());
  return r;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i = std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return sorted[i];
}

}  // namespace
}  // namespace gecd

int main(int argc, char** argv) {
  using namespace gecd;
  Flags f;
  if (!ParseFlags(argc, argv, &f)) return 2;
  bool have_gpu = false;
  std::string no_gpu = "a CPU-only build";
#ifdef GECD_HAVE_CUDA
  have_gpu = kernels::HaveCudaDevice(&no_gpu);
#endif
  if (!have_gpu) std::fprintf(stderr, "no CUDA device (%s)\n", no_gpu.c_str());
  if (f.backend.empty()) f.backend = have_gpu ? "cuda" : "cpu";
  if (f.backend == "cuda" && !have_gpu) {
    std::fprintf(stderr, "--backend=cuda but no CUDA device (or a CPU-only build)\n");
    return 2;
  }
  const bool cuda = f.backend == "cuda";
  if (f.models.empty()) f.models = cuda ? "llama1b,qwen05b" : "tiny";
  if (f.requests < 0) f.requests = cuda ? 2048 : 16;
  if (f.rate < 0) f.rate = cuda ? 3000 : 4;
  if (!cuda) {
    f.rows = "cpu:g0a1,cpu:g0a1c1";
    f.warmup = std::min(f.warmup, 2);
    f.gen = std::min(f.gen, 20);
    f.poisson_seconds = std::min(f.poisson_seconds, 2.0);
  }
  std::vector<Row> rows;
  for (const std::string& r :
       std::vector<std::string>(absl::StrSplit(f.rows, ',', absl::SkipEmpty()))) {
    Row row;
    const size_t colon = r.find(':');
    row.quant = r.substr(0, colon);
    if (colon != std::string::npos) {
      row.graphs = r.find("g0") == std::string::npos;
      row.async = r.find("a0") == std::string::npos;
      row.copy = r.find("c1") != std::string::npos;
    }
    rows.push_back(row);
  }
  std::printf(
      "engine_bench: backend %s, %d+%d tokens per request, saturation %d requests, "
      "Poisson %.0f req/s for %.1f s\n",
      f.backend.c_str(), f.prompt, f.gen, f.requests, f.rate, f.poisson_seconds);
  std::printf("%-8s %-16s %9s %10s %8s %6s %8s %6s %8s %8s %8s %7s %9s %6s\n", "model", "config",
              "sat_rps", "sat_tok/s", "TFLOP/s", "%peak", "TB/s", "%peak", "p50_ms", "p99_ms",
              "poisson", "graph%", "idle_ms", "gaps");
  const auto t0 = Clock::now();
  for (const std::string& mname :
       std::vector<std::string>(absl::StrSplit(f.models, ',', absl::SkipEmpty()))) {
    const Shape shape = ShapeFor(mname);
    const int layers = f.layers > 0 ? f.layers : shape.layers;
    testing::ScopedTempDir tmp;
    const auto tw = Clock::now();
    if (!WriteBenchCheckpoint(shape, layers, tmp.path())) {
      std::fprintf(stderr, "cannot write the %s model\n", shape.name.c_str());
      return 1;
    }
    auto ckpt = model::Checkpoint::Open(tmp.path());
    if (!ckpt.ok()) {
      std::fprintf(stderr, "%s\n", std::string(ckpt.status().message()).c_str());
      return 1;
    }
    std::fprintf(stderr, "[%s] wrote %.1f B params in %.1f s\n", shape.name.c_str(),
                 model::ParameterCount((*ckpt)->config()) / 1e9, Seconds(tw, Clock::now()));
    std::string loaded_quant;
    std::unique_ptr<engine::Backend> backend;
    for (const Row& row : rows) {
      double attn_wb = 2, mlp_wb = 2;
      if (row.quant != loaded_quant) {
        backend.reset();
        const auto tl = Clock::now();
        if (!cuda) {
          engine::CpuBackendOptions o;
          o.kv_cache_mb = 512;
          o.max_step_tokens = std::min(f.max_step_tokens, 2048);
          o.max_batch_size = std::min(f.max_batch_size, 128);
          auto b = engine::CpuBackend::Create(**ckpt, o);
          if (!b.ok()) {
            std::fprintf(stderr, "%s\n", std::string(b.status().message()).c_str());
            return 1;
          }
          backend = std::move(*b);
        } else {
#ifdef GECD_HAVE_CUDA
          engine::CudaBackendOptions o;
          o.kv_cache_memory_fraction = f.kv_fraction;
          o.max_step_tokens = f.max_step_tokens;
          o.max_batch_size = f.max_batch_size;
          o.quantization = row.quant == "bf16" ? engine::CudaBackendOptions::Quantization::kNone
                                               : engine::CudaBackendOptions::Quantization::kFp8;
          o.attention_fp8 = row.quant != "fp8attnbf16";
          if (row.quant == "fp8tensor") {
            o.fp8_scaling = engine::CudaBackendOptions::Fp8Scaling::kPerTensor;
          }
          auto b = engine::CudaBackend::Create(**ckpt, o);
          if (!b.ok()) {
            std::fprintf(stderr, "%s\n", std::string(b.status().message()).c_str());
            return 1;
          }
          std::fprintf(stderr, "[%s] %s\n", shape.name.c_str(), (*b)->Describe().c_str());
          backend = std::move(*b);
#endif
        }
        std::fprintf(stderr, "[%s] loaded %s in %.1f s\n", shape.name.c_str(), row.quant.c_str(),
                     Seconds(tl, Clock::now()));
        loaded_quant = row.quant;
      }
      if (row.quant.rfind("fp8", 0) == 0) {
        mlp_wb = 1;
        attn_wb = row.quant == "fp8attnbf16" ? 2 : 1;
      }
#ifdef GECD_HAVE_CUDA
      auto* cb = dynamic_cast<engine::CudaBackend*>(backend.get());
      if (cb != nullptr) {
        cb->set_graphs_enabled(row.graphs);
        cb->set_async(row.async);
      }
#endif
      // Warm-up (captures graphs, plans GEMMs), then saturation, then Poisson arrivals.
      if (f.warmup > 0) {
        Drive(*backend, std::vector<double>(f.warmup, 0.0), f.prompt, f.gen, row, attn_wb, mlp_wb,
              1);
      }
#ifdef GECD_HAVE_CUDA
      if (cb != nullptr) cb->ResetStats();
#endif
      const RunResult sat = Drive(*backend, std::vector<double>(f.requests, 0.0), f.prompt, f.gen,
                                  row, attn_wb, mlp_wb, 2);
      double graph_pct = 0, idle_ms = 0;
      int64_t gaps = 0;
#ifdef GECD_HAVE_CUDA
      if (cb != nullptr) {
        const auto& s = cb->stats();
        graph_pct = s.steps > 0 ? 100.0 * s.graph_steps / s.steps : 0;
        idle_ms = s.device_idle_ms;
        gaps = s.idle_gaps;
      }
#endif
      std::mt19937_64 rng(3);
      std::exponential_distribution<double> gap(f.rate);
      std::vector<double> arrivals;
      for (double t = gap(rng); t < f.poisson_seconds; t += gap(rng)) arrivals.push_back(t);
      const RunResult poi = Drive(*backend, arrivals, f.prompt, f.gen, row, attn_wb, mlp_wb, 4);
      if (!sat.ok || !poi.ok) {
        std::printf("%-8s %s:g%da%d%s FAILED (step error above)\n", shape.name.c_str(),
                    row.quant.c_str(), row.graphs ? 1 : 0, row.async ? 1 : 0, row.copy ? "c1" : "");
        std::fflush(stdout);
        loaded_quant.clear();  // reload: the backend may be in an error state
        continue;
      }
      const double tflops = sat.wall_s > 0 ? sat.cost.flops / sat.wall_s / 1e12 : 0;
      const double tbps = sat.wall_s > 0 ? sat.cost.bytes / sat.wall_s / 1e12 : 0;
      char config[64];
      std::snprintf(config, sizeof(config), "%s g%d a%d%s", row.quant.c_str(), row.graphs ? 1 : 0,
                    row.async ? 1 : 0, row.copy ? " c1" : "");
      std::printf(
          "%-8s %-16s %9.0f %10.0f %8.1f %5.1f%% %8.3f %5.1f%% %8.1f %8.1f %8.0f %6.1f%% "
          "%9.1f %6lld\n",
          shape.name.c_str(), config, sat.wall_s > 0 ? sat.completed / sat.wall_s : 0,
          sat.wall_s > 0 ? sat.generated / sat.wall_s : 0, tflops, 100 * tflops / f.peak_tflops,
          tbps, 100 * tbps / f.peak_tbps, Percentile(poi.latency_ms, 0.5),
          Percentile(poi.latency_ms, 0.99),
          poi.wall_s > 0 ? poi.completed / std::max(poi.wall_s, f.poisson_seconds) : 0, graph_pct,
          idle_ms, static_cast<long long>(gaps));
      std::fflush(stdout);
    }
  }
  std::printf("total %.1f s\n", Seconds(t0, Clock::now()));
  return 0;
}
