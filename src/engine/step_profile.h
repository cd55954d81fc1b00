#ifndef GECD_ENGINE_STEP_PROFILE_H_
#define GECD_ENGINE_STEP_PROFILE_H_

#include <cstdint>

// Where the CPU backend's Forward spends its time, stage by stage (matmuls per projection group,
// attention, norms, RoPE, sampling, ...), for bench/cpu_peer/cpu_step_profile. The stage marks
// in cpu_backend.cc compile to nothing unless the build sets GECD_STEP_PROFILE (CMake option
// GECD_STEP_PROFILE, default OFF), so the engine is not slowed when the profiler is off.
//
// A lap timer: GECD_PROFILE_BEGIN(stage) starts the clock on a stage, each GECD_PROFILE_MARK(next)
// charges the time since the last mark to the current stage and switches to `next`, and
// GECD_PROFILE_END() charges the last stage. Marks are made by the one thread that runs Forward
// (the counters are relaxed atomics, so a reader on another thread sees whole values); Snapshot
// and Reset may be called from any thread between steps.
namespace gecd::engine::profile {

enum Stage : int {
  kValidate,    // batch checks, token copy
  kEmbed,       // embedding rows
  kRopeTables,  // cos/sin per token
  kInputNorm,   // RMSNorm before attention
  kQkv,         // q, k, v projections (one GEMM)
  kRopeStore,   // RoPE on q and k, K/V rows into the paged cache
  kAttention,   // scores, softmax, weighted values, per sequence
  kO,           // o projection
  kPostNorm,    // RMSNorm before the MLP
  kGateUp,      // gate and up projections (one GEMM)
  kSilu,        // SiLU(gate) * up
  kDown,        // down projection
  kFinalNorm,   // final RMSNorm of the sampling rows
  kLmHead,      // lm_head GEMM
  kSample,      // copy cursor, copy bias and argmax per sampling row
  kResult,      // logits copy, previous tokens
  kNumStages,
};

const char* StageName(int stage);

struct Counters {
  uint64_t ns[kNumStages] = {};
  uint64_t forwards = 0;
};

// True when this build's engine was compiled with GECD_STEP_PROFILE (the marks are live).
bool CompiledIn();
void Reset();
Counters Snapshot();

// The lap timer behind the macros.
void Begin(int stage);
void Mark(int stage);
void End();

}  // namespace gecd::engine::profile

#ifdef GECD_STEP_PROFILE
#define GECD_PROFILE_BEGIN(stage) ::gecd::engine::profile::Begin(::gecd::engine::profile::stage)
#define GECD_PROFILE_MARK(stage) ::gecd::engine::profile::Mark(::gecd::engine::profile::stage)
#define GECD_PROFILE_END() ::gecd::engine::profile::End()
#else
#define GECD_PROFILE_BEGIN(stage) \
  do {                            \
  } while (0)
#define GECD_PROFILE_MARK(stage) \
  do {                           \
  } while (0)
#define GECD_PROFILE_END() \
  do {                     \
  } while (0)
#endif

#endif  // GECD_ENGINE_STEP_PROFILE_H_
