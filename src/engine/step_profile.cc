#include "engine/step_profile.h"

#include <atomic>
#include <chrono>

namespace gecd::engine::profile {
namespace {

std::atomic<uint64_t> g_ns[kNumStages];
std::atomic<uint64_t> g_forwards{0};
// Only the thread running Forward touches these.
thread_local int t_stage = -1;
thread_local std::chrono::steady_clock::time_point t_since;

constexpr const char* kNames[kNumStages] = {
    "validate",   "embed",   "rope tables", "input norm", "qkv",     "rope+store",
    "attention",  "o",       "post norm",   "gate_up",    "silu*up", "down",
    "final norm", "lm_head", "sample",      "result",
};

void Charge(std::chrono::steady_clock::time_point now) {
  if (t_stage < 0) return;
  g_ns[t_stage].fetch_add(
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - t_since).count()),
      std::memory_order_relaxed);
}

}  // namespace

const char* StageName(int stage) { return stage >= 0 && stage < kNumStages ? kNames[stage] : "?"; }

bool CompiledIn() {
#ifdef GECD_STEP_PROFILE
  return true;
#else
  return false;
#endif
}

void Reset() {
  for (auto& ns : g_ns) ns.store(0, std::memory_order_relaxed);
  g_forwards.store(0, std::memory_order_relaxed);
}

Counters Snapshot() {
  Counters c;
  for (int i = 0; i < kNumStages; ++i) c.ns[i] = g_ns[i].load(std::memory_order_relaxed);
  c.forwards = g_forwards.load(std::memory_order_relaxed);
  return c;
}

void Begin(int stage) {
  t_stage = stage;
  t_since = std::chrono::steady_clock::now();
  g_forwards.fetch_add(1, std::memory_order_relaxed);
}

void Mark(int stage) {
  const auto now = std::chrono::steady_clock::now();
  Charge(now);
  t_stage = stage;
  t_since = now;
}

void End() {
  Charge(std::chrono::steady_clock::now());
  t_stage = -1;
}

}  // namespace gecd::engine::profile
