// cpu_step_profile: where a step of the CPU engine goes, on JFLEG's sentence mix, at the batch
// sizes the daemon reaches. Runs gecd's default pipeline in-process (the prompts as
// text::PromptBuilder builds them, no spelling stage; the config's copy bias) through a plain
// engine::Engine over engine.backend cpu, closed loop: `--concurrency N` sentences in flight,
// each finished one replaced by the next source, until every source ran. For each N it prints
// one markdown table: per stage of CpuBackend::Forward (engine/step_profile.h; the build must
// set -DGECD_STEP_PROFILE=ON, or only the totals are printed), the engine's host work around it
// (PlanStep: scheduling and blocks; CommitStep: tokens, copy cursor, stop rule), milliseconds
// per step, share of the step, and the matmuls' achieved GFLOP/s beside what cblas_sgemm alone
// reaches on the same shape (the step's mean rows; one weight matrix per layer, cycled).
//
//   cpu_step_profile [--config FILE] [--set KEY=VALUE]... --jfleg-src FILE
//                    [--concurrency 8,32,128] [--limit N]
//
// Single-threaded driver (BLAS threads per engine.threads). Errors: stderr, exit 1; usage: 2.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "config/config.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/step_profile.h"
#include "engine_options/engine_options.h"
#include "model/checkpoint.h"
#include "peer_inputs.h"
#include "text/prompt_builder.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace profile = gecd::engine::profile;
using Clock = std::chrono::steady_clock;
using gecd::bench::cpu_peer::PeerPrompt;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The matmul groups and the profile stage each is timed under.
struct Group {
  const char* name;
  int stage;
  int n = 0;         // output features
  int k = 0;         // input features
  double flops = 0;  // multiply-adds x 2, summed over the run
};

// What cblas_sgemm alone reaches on one group's shape: `rows` x k times k x n (weights
// transposed, as CpuLinear calls it), cycling through `copies` distinct weight matrices (one per
// layer, so they stream from memory as in the model), for at least 0.3 s. GFLOP/s.
double IsolatedSgemmGflops(int rows, int n, int k, int copies) {
  std::vector<float> x(static_cast<size_t>(rows) * k, 0.5f);
  std::vector<float> w(static_cast<size_t>(copies) * n * k, 0.25f);
  std::vector<float> y(static_cast<size_t>(rows) * n);
  auto once = [&](int c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, k, 1.0f, x.data(), k,
                w.data() + static_cast<size_t>(c) * n * k, k, 0.0f, y.data(), n);
  };
  for (int c = 0; c < copies; ++c) once(c);
  int64_t calls = 0;
  const Clock::time_point start = Clock::now();
  double elapsed = 0;
  while (elapsed < 0.3) {
    once(static_cast<int>(calls % copies));
    ++calls;
    elapsed = Seconds(Clock::now() - start);
  }
  return 2.0 * rows * n * k * calls / elapsed * 1e-9;
}

struct RunTotals {
  int concurrency = 0;
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t sampled = 0;
  int64_t sequences = 0;
  int64_t generated = 0;
  double plan_s = 0;
  double forward_s = 0;
  double commit_s = 0;
  double refill_s = 0;  // AddSequence of the next sources
  double wall_s = 0;
  profile::Counters stages;
  std::vector<Group> groups;
  int max_sampled = 0;
  int layers = 0;
};

absl::StatusOr<RunTotals> RunClosedLoop(gecd::engine::Backend* backend,
                                        const gecd::engine::EngineOptions& options,
                                        const std::vector<PeerPrompt>& prompts, int concurrency) {
  const gecd::model::ModelConfig& c = backend->config();
  const double hidden = c.hidden_size;
  const double inter = c.intermediate_size;
  const double q = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  const double layers = c.num_hidden_layers;
  RunTotals r;
  r.concurrency = concurrency;
  r.layers = c.num_hidden_layers;
  const int hi = c.hidden_size;
  const int ii = c.intermediate_size;
  const int qi = c.num_attention_heads * c.head_dim;
  const int kvi = c.num_key_value_heads * c.head_dim;
  r.groups = {{"qkv", profile::kQkv, qi + 2 * kvi, hi},
              {"o", profile::kO, hi, qi},
              {"gate_up", profile::kGateUp, 2 * ii, hi},
              {"down", profile::kDown, hi, ii},
              {"lm_head", profile::kLmHead, c.vocab_size, hi}};
  // Per token (per sampled row for lm_head): 2 x the weights' elements.
  const double per_token[] = {2 * layers * hidden * (q + 2 * kv), 2 * layers * q * hidden,
                              2 * layers * hidden * 2 * inter, 2 * layers * inter * hidden,
                              2 * hidden * c.vocab_size};

  gecd::engine::Engine engine(backend, nullptr, options);
  size_t next = 0;
  int in_flight = 0;
  auto refill = [&]() -> absl::Status {
    while (in_flight < concurrency && next < prompts.size()) {
      const PeerPrompt& p = prompts[next];
      const size_t id = next++;
      if (!p.ok || p.unchanged) continue;
      gecd::engine::GenerationParams params;
      params.max_new_tokens = p.max_new_tokens;
      params.copy_bias = p.copy_bias;
      params.copy_begin = p.copy_begin;
      params.copy_end = p.copy_end;
      RETURN_IF_ERROR(engine.AddSequence(id, p.tokens, std::move(params)));
      ++in_flight;
      ++r.sequences;
    }
    return absl::OkStatus();
  };
  profile::Reset();
  gecd::engine::StepResult result;
  const Clock::time_point start = Clock::now();
  Clock::time_point t0 = start;
  RETURN_IF_ERROR(refill());
  r.refill_s += Seconds(Clock::now() - t0);
  while (engine.HasWork()) {
    t0 = Clock::now();
    const gecd::engine::StepPlan& plan = engine.PlanStep();
    const Clock::time_point t1 = Clock::now();
    if (plan.empty()) return absl::InternalError("engine has work but planned an empty step");
    RETURN_IF_ERROR(backend->Forward(plan.batch, &result));
    const Clock::time_point t2 = Clock::now();
    const int tokens = plan.batch.num_tokens();
    const int sampled = plan.batch.num_sampled();
    const std::vector<gecd::engine::StepEvent> events = engine.CommitStep(plan, result);
    const Clock::time_point t3 = Clock::now();
    for (const gecd::engine::StepEvent& e : events) {
      ++r.generated;
      if (e.finished) --in_flight;
    }
    RETURN_IF_ERROR(refill());
    const Clock::time_point t4 = Clock::now();
    r.plan_s += Seconds(t1 - t0);
    r.forward_s += Seconds(t2 - t1);
    r.commit_s += Seconds(t3 - t2);
    r.refill_s += Seconds(t4 - t3);
    ++r.steps;
    r.tokens += tokens;
    r.sampled += sampled;
    r.max_sampled = std::max(r.max_sampled, sampled);
    for (size_t g = 0; g < r.groups.size(); ++g) {
      r.groups[g].flops += per_token[g] * (g + 1 == r.groups.size() ? sampled : tokens);
    }
  }
  r.wall_s = Seconds(Clock::now() - start);
  r.stages = profile::Snapshot();
  return r;
}

void Print(const RunTotals& r) {
  const double steps = static_cast<double>(r.steps);
  const double step_ms = r.wall_s * 1e3 / steps;
  std::printf(
      "\n### concurrency %d: %lld sentences, %lld steps, %.1f tokens and %.1f sampled rows a step "
      "(max %d), %.2f ms a step, %.1f sentences/s, %.0f generated tokens/s\n\n",
      r.concurrency, static_cast<long long>(r.sequences), static_cast<long long>(r.steps),
      r.tokens / steps, r.sampled / steps, r.max_sampled, step_ms, r.sequences / r.wall_s,
      r.generated / r.wall_s);
  std::printf(
      "| stage | ms/step | share | GFLOP/s | same sgemm alone, GFLOP/s |\n"
      "|---|---:|---:|---:|---:|\n");
  auto row = [&](const char* name, double seconds, double flops, double alone = 0) {
    std::printf("| %s | %.3f | %.1f%% |", name, seconds * 1e3 / steps, 100 * seconds / r.wall_s);
    if (flops > 0 && seconds > 0) {
      std::printf(" %.1f |", flops / seconds * 1e-9);
    } else {
      std::printf(" |");
    }
    if (alone > 0) {
      std::printf(" %.1f |\n", alone);
    } else {
      std::printf(" |\n");
    }
  };
  const int layers = r.layers;
  double matmul_s = 0;
  double matmul_flops = 0;
  double staged_s = 0;
  if (profile::CompiledIn()) {
    for (int s = 0; s < profile::kNumStages; ++s) {
      const double sec = r.stages.ns[s] * 1e-9;
      staged_s += sec;
      double flops = 0;
      double alone = 0;
      for (const Group& g : r.groups) {
        if (g.stage == s) {
          flops = g.flops;
          matmul_s += sec;
          matmul_flops += g.flops;
          // The step's mean rows for this group (sampled rows for lm_head).
          const bool head = g.stage == profile::kLmHead;
          const int rows = static_cast<int>((head ? r.sampled : r.tokens) / steps + 0.5);
          if (rows > 0) {
            alone = IsolatedSgemmGflops(rows, g.n, g.k, head ? 1 : layers);
          }
        }
      }
      row(profile::StageName(s), sec, flops, alone);
    }
    row("forward, untimed rest", std::max(0.0, r.forward_s - staged_s), 0);
  } else {
    row("forward (build without -DGECD_STEP_PROFILE=ON: no stages)", r.forward_s, 0);
  }
  row("engine PlanStep (scheduling, blocks)", r.plan_s, 0);
  row("engine CommitStep (tokens, copy cursor, stop)", r.commit_s, 0);
  row("driver: add next sentences", r.refill_s, 0);
  const double other = r.wall_s - r.forward_s - r.plan_s - r.commit_s - r.refill_s;
  row("driver: rest", std::max(0.0, other), 0);
  double total_flops = 0;
  for (const Group& g : r.groups) total_flops += g.flops;
  if (profile::CompiledIn()) {
    std::printf("| **all matmuls** | %.3f | %.1f%% | %.1f | |\n", matmul_s * 1e3 / steps,
                100 * matmul_s / r.wall_s, matmul_flops / matmul_s * 1e-9);
    std::printf("| **everything else** | %.3f | %.1f%% | | |\n",
                (r.wall_s - matmul_s) * 1e3 / steps, 100 * (r.wall_s - matmul_s) / r.wall_s);
  }
  std::printf("| **whole step** | %.3f | 100%% | %.1f | |\n", step_ms,
              total_flops / r.wall_s * 1e-9);
}

struct Flags {
  std::string config;
  std::vector<std::string> overrides;
  std::string jfleg_src;
  std::vector<int> concurrency = {8, 32, 128};
  int limit = 0;
};

absl::Status Run(const Flags& f) {
  ASSIGN_OR_RETURN(gecd::config::Config cfg,
                   gecd::config::LoadConfigWithOverrides(f.config, f.overrides));
  if (cfg.engine.backend != "cpu") {
    return absl::InvalidArgumentError("cpu_step_profile profiles engine.backend cpu only");
  }
  ASSIGN_OR_RETURN(std::vector<std::string> texts,
                   gecd::bench::cpu_peer::ReadJflegSources(f.jfleg_src));
  if (f.limit > 0 && static_cast<size_t>(f.limit) < texts.size()) texts.resize(f.limit);
  ASSIGN_OR_RETURN(std::unique_ptr<gecd::model::Checkpoint> checkpoint,
                   gecd::model::Checkpoint::Open(cfg.model.dir));
  ASSIGN_OR_RETURN(std::unique_ptr<gecd::model::Tokenizer> tokenizer,
                   gecd::model::Tokenizer::LoadFromModelDir(cfg.model.dir));
  ASSIGN_OR_RETURN(gecd::text::PromptBuilder builder,
                   gecd::text::PromptBuilder::Create(cfg, *tokenizer, nullptr));
  const std::vector<PeerPrompt> prompts = gecd::bench::cpu_peer::BuildPrompts(builder, texts);
  ASSIGN_OR_RETURN(std::unique_ptr<gecd::engine::Backend> backend,
                   gecd::config::CreateBackend(cfg, *checkpoint));
  const gecd::engine::EngineOptions options =
      gecd::config::EngineOptionsFrom(*checkpoint, cfg.engine);
  std::printf(
      "cpu_step_profile: %s, %zu sources, copy bias %g, engine.threads %d, stage timers %s\n",
      cfg.model.dir.c_str(), prompts.size(), cfg.model.copy_bias, cfg.engine.threads,
      profile::CompiledIn() ? "on" : "off (configure with -DGECD_STEP_PROFILE=ON)");
  // Warm-up: page in the weights and the cache, let BLAS start its threads.
  {
    const std::vector<PeerPrompt> warm(prompts.begin(),
                                       prompts.begin() + std::min<size_t>(64, prompts.size()));
    RETURN_IF_ERROR(RunClosedLoop(backend.get(), options, warm, 64).status());
  }
  for (int n : f.concurrency) {
    ASSIGN_OR_RETURN(RunTotals r, RunClosedLoop(backend.get(), options, prompts, n));
    Print(r);
  }
  return absl::OkStatus();
}

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "cpu_step_profile: %s\nusage: cpu_step_profile [--config FILE] [--set K=V]... "
               "--jfleg-src FILE [--concurrency 8,32,128] [--limit N]\n",
               why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage("flag without a value: " + a);
    const std::string v = argv[++i];
    if (a == "--config") {
      f.config = v;
    } else if (a == "--set") {
      f.overrides.push_back(v);
    } else if (a == "--jfleg-src") {
      f.jfleg_src = v;
    } else if (a == "--limit") {
      if (!absl::SimpleAtoi(v, &f.limit) || f.limit < 0) return Usage("--limit: " + v);
    } else if (a == "--concurrency") {
      f.concurrency.clear();
      for (absl::string_view part : absl::StrSplit(v, ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(part, &n) || n < 1) return Usage("--concurrency: " + v);
        f.concurrency.push_back(n);
      }
    } else {
      return Usage("unknown flag " + a);
    }
  }
  if (f.jfleg_src.empty()) return Usage("--jfleg-src is required");
  if (absl::Status s = Run(f); !s.ok()) {
    std::fprintf(stderr, "cpu_step_profile: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
