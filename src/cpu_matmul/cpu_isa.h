#ifndef GECD_CPU_MATMUL_CPU_ISA_H_
#define GECD_CPU_MATMUL_CPU_ISA_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

// The instruction set oneDNN's kernels may use in this process (engine.cpu_isa): "auto" (the
// best this CPU has) or a ceiling in oneDNN's names, so tests and CI can run the kernels of a
// lower ISA on a higher CPU. oneDNN fixes its ISA once per process, before its first kernel;
// SelectCpuIsa keeps that rule: a later call asking another ceiling is an error ("auto" asks
// none, so it gets whatever was chosen).
// Thread-safe.
namespace gecd::cpu_matmul {

struct CpuIsa {
  std::string name;       // the ISA the kernels use, in oneDNN's names ("avx512_core_vnni")
  bool int8_dot = false;  // VNNI (AVX512-VNNI or AVX-VNNI): int8 dot products in one instruction
  // AVX512-BF16 or AMX-BF16: bf16 dot products with f32 sums in hardware (oneDNN would
  // otherwise emulate them, slower than f32 sgemm)
  bool bf16_dot = false;
};

// Sets the ceiling `requested` ("auto", avx2, avx2_vnni, avx512_core, avx512_core_vnni,
// avx512_core_bf16 or avx512_core_amx) and returns the ISA the
// kernels will use. FailedPrecondition naming engine.cpu_isa when this CPU lacks `requested`,
// or when this process already chose another ceiling than `requested` (not "auto"); InvalidArgument
// for an unknown name.
absl::StatusOr<CpuIsa> SelectCpuIsa(const std::string& requested);

// The threads oneDNN's kernels run on (engine.threads; 0 leaves OpenMP's default: every core).
void SetMatmulThreads(int threads);

// The threads ParallelRows runs on from this thread: as many as its kernels get.
int ParallelWorkers();

// Calls f(worker, row) once for every row in [0, rows), on this thread's OpenMP threads
// (worker < ParallelWorkers()), handing out `chunk` rows at a time to whichever thread is free:
// a thread the OS takes away mid-loop holds up only the rows it has taken, and the others
// finish the rest. Returns once every call has returned. f must be safe to call concurrently
// for different rows.
void ParallelRows(int rows, int chunk, absl::FunctionRef<void(int worker, int row)> f);

}  // namespace gecd::cpu_matmul

#endif  // GECD_CPU_MATMUL_CPU_ISA_H_
