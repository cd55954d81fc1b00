#include "engine_options/engine_options.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/cpu_limit.h"
#include "common/openmp_wait.h"
#include "common/status_macros.h"
#ifdef GECD_HAVE_CUDA
#include "cuda_backend/cuda_backend.h"
#endif

namespace gecd::config {

int ComputeThreadsFor(const EngineSection& engine) {
  return engine.threads > 0 ? engine.threads : ComputeThreads(ProcessCpuLimit());
}

std::string DescribeComputeThreads(const EngineSection& engine) {
  std::string threads;
  if (engine.threads > 0) {
    threads = absl::StrCat(engine.threads, " compute threads (engine.threads)");
  } else {
    const CpuLimit& limit = ProcessCpuLimit();
    threads = absl::StrFormat("%d compute threads (engine.threads 0: %.2f CPUs, from the %s)",
                              ComputeThreads(limit), limit.cpus, limit.source);
  }
  const std::vector<std::string> wait = OpenMpWaitChoices();
  return absl::StrCat(threads, "; OpenMP's threads wait as ",
                      wait.empty() ? "libgomp's default" : absl::StrJoin(wait, " "));
}

engine::CpuBackendOptions CpuBackendOptionsFrom(const EngineSection& engine) {
  return {.kv_block_size = engine.kv_block_size,
          .num_kv_blocks = engine.kv_cache_blocks,
          .kv_cache_mb = engine.kv_cache_mb,
          .max_step_tokens = engine.max_step_tokens,
          .max_batch_size = engine.max_batch_size,
          .threads = ComputeThreadsFor(engine),
          .int8 = engine.quantization == "int8",
          .matmul = engine.cpu_matmul == "f32"    ? engine::CpuMatmul::kF32
                    : engine.cpu_matmul == "bf16" ? engine::CpuMatmul::kBf16
                                                  : engine::CpuMatmul::kAuto,
          .cpu_isa = engine.cpu_isa};
}

absl::StatusOr<std::unique_ptr<engine::Backend>> CreateBackend(
    const Config& config, const model::Checkpoint& checkpoint) {
  const EngineSection& e = config.engine;
  if (e.backend == "cuda") {
    if (e.quantization == "int8") {
      return absl::InvalidArgumentError(
          "engine.quantization: int8 is the cpu backend's; the cuda backend takes fp8 or none");
    }
#ifdef GECD_HAVE_CUDA
    engine::CudaBackendOptions options;
    options.device = e.device;
    options.kv_cache_memory_fraction = e.kv_cache_memory_fraction;
    options.kv_block_size = e.kv_block_size;
    options.max_step_tokens = e.max_step_tokens;
    options.max_batch_size = e.max_batch_size;
    options.graph_batch_sizes = GraphBatchSizes(e);
    options.quantization = e.quantization == "fp8"
                               ? engine::CudaBackendOptions::Quantization::kFp8
                               : engine::CudaBackendOptions::Quantization::kNone;
    options.attention_fp8 = e.attention_fp8;
    options.fp8_scaling = e.fp8_scaling == "per_tensor"
                              ? engine::CudaBackendOptions::Fp8Scaling::kPerTensor
                              : engine::CudaBackendOptions::Fp8Scaling::kPerChannel;
    ASSIGN_OR_RETURN(std::unique_ptr<engine::CudaBackend> cuda,
                     engine::CudaBackend::Create(checkpoint, options));
    return cuda;
#else
    return absl::FailedPreconditionError(
        "engine.backend: cuda, but this gecd was built without CUDA (no nvcc at build time)");
#endif
  }
  if (e.backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.backend '", e.backend, "' runs no model (use cpu or cuda)"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<engine::CpuBackend> cpu,
                   engine::CpuBackend::Create(checkpoint, CpuBackendOptionsFrom(e)));
  return cpu;
}

engine::EngineOptions EngineOptionsFrom(const model::Checkpoint& checkpoint,
                                        const EngineSection& engine) {
  const std::vector<int>& eos = checkpoint.generation_config().eos_token_ids;
  engine::EngineOptions options;
  options.eos_token_ids.assign(eos.begin(), eos.end());
  options.speculate_tokens = engine.speculate_tokens;
  return options;
}

}  // namespace gecd::config
