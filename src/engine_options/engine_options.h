#ifndef GECD_ENGINE_OPTIONS_ENGINE_OPTIONS_H_
#define GECD_ENGINE_OPTIONS_ENGINE_OPTIONS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "engine/backend.h"
#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "model/checkpoint.h"

// The settings every command that runs the model (serve, generate, eval) derives the same way.
// (The spelling stage's: spelling/spelling_config.h.)
namespace gecd::config {

// engine.threads, or with 0 the CPUs this process may keep busy (common/cpu_limit.h): a
// container's CPU quota counts, which BLAS and OpenMP do not see (they start a thread per
// visible core, and the quota then throttles them in the middle of a matmul).
int ComputeThreadsFor(const EngineSection& engine);
// The same for the start-up log, saying where the number came from, and how OpenMP's threads
// wait at a barrier (OMP_WAIT_POLICY and GOMP_SPINCOUNT in this process's environment, which
// `gecd serve` sets for its engine: docs/OPERATIONS.md).
std::string DescribeComputeThreads(const EngineSection& engine);

// The engine section's settings as the CPU backend takes them.
engine::CpuBackendOptions CpuBackendOptionsFrom(const EngineSection& engine);

// engine.backend's model backend ("cpu" or "cuda"), sized and configured from the engine
// section. FailedPrecondition for cuda in a build without CUDA; errors name the key or file.
absl::StatusOr<std::unique_ptr<engine::Backend>> CreateBackend(const Config& config,
                                                               const model::Checkpoint& checkpoint);

// The engine options the checkpoint sets: its EOS ids (generation_config.json's, which
// Checkpoint::Open already filled in from config.json where it had none); and the engine
// section's: engine.speculate_tokens.
engine::EngineOptions EngineOptionsFrom(const model::Checkpoint& checkpoint,
                                        const EngineSection& engine);

}  // namespace gecd::config

#endif  // GECD_ENGINE_OPTIONS_ENGINE_OPTIONS_H_
