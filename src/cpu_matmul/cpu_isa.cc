#include "cpu_matmul/cpu_isa.h"

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace gecd::cpu_matmul {
namespace {

using Isa = dnnl::cpu_isa;

const std::vector<std::pair<std::string, Isa>>& IsaTable() {
  static const auto* table = new std::vector<std::pair<std::string, Isa>>{
      {"avx2", Isa::avx2},
      {"avx2_vnni", Isa::avx2_vnni},
      {"avx512_core", Isa::avx512_core},
      {"avx512_core_vnni", Isa::avx512_core_vnni},
      {"avx512_core_bf16", Isa::avx512_core_bf16},
      {"avx512_core_amx", Isa::avx512_core_amx},
  };
  return *table;
}

// oneDNN's ISA values are bit sets: an ISA includes another when it has all its bits (avx2_vnni
// and the avx512 ones are not nested).
bool Includes(Isa have, Isa want) {
  const unsigned h = static_cast<unsigned>(have), w = static_cast<unsigned>(want);
  return (h & w) == w;
}

std::string IsaName(Isa isa) {
  // The highest table entry the ISA includes; below AVX2 oneDNN runs reference kernels.
  std::string name = "below avx2";
  for (const auto& [n, i] : IsaTable()) {
    if (Includes(isa, i)) name = n;
  }
  return name;
}

struct Chosen {
  std::string requested;
  CpuIsa isa;
};

absl::Mutex chosen_mutex;
std::optional<Chosen> chosen ABSL_GUARDED_BY(chosen_mutex);

}  // namespace

absl::StatusOr<CpuIsa> SelectCpuIsa(const std::string& requested) {
  absl::MutexLock lock(&chosen_mutex);
  if (chosen.has_value()) {
    if (chosen->requested == requested || requested == "auto") return chosen->isa;
    return absl::FailedPreconditionError(absl::StrCat(
        "engine.cpu_isa: ", requested, ", but this process already runs oneDNN's kernels under ",
        chosen->requested, " (", chosen->isa.name, "); the ISA is chosen once per process"));
  }
  std::optional<Isa> ceiling;
  if (requested != "auto") {
    for (const auto& [name, isa] : IsaTable()) {
      if (name == requested) ceiling = isa;
    }
    if (!ceiling.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine.cpu_isa: unknown ISA '", requested, "'"));
    }
    // Set before anything reads the ISA: oneDNN fixes it at its first read.
    if (dnnl::set_max_cpu_isa(*ceiling) != dnnl::status::success) {
      return absl::FailedPreconditionError(
          absl::StrCat("engine.cpu_isa: ", requested,
                       ": oneDNN refused the ceiling (its kernels already ran in this process)"));
    }
    if (const Isa effective = dnnl::get_effective_cpu_isa(); !Includes(effective, *ceiling)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "engine.cpu_isa: ", requested, ", but this CPU lacks it (under that ceiling it offers ",
          IsaName(effective), ")"));
    }
  }
  const Isa effective = dnnl::get_effective_cpu_isa();
  CpuIsa isa{
      .name = IsaName(effective),
      .int8_dot = Includes(effective, Isa::avx512_core_vnni) || Includes(effective, Isa::avx2_vnni),
      .bf16_dot = Includes(effective, Isa::avx512_core_bf16)};
  chosen = Chosen{.requested = requested, .isa = isa};
  return isa;
}

void SetMatmulThreads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

int ParallelWorkers() { return omp_get_max_threads(); }

void ParallelRows(int rows, int chunk, absl::FunctionRef<void(int worker, int row)> f) {
  // One row, or a few: not worth waking the other threads.
  if (rows <= chunk || omp_get_max_threads() == 1) {
    for (int row = 0; row < rows; ++row) f(0, row);
    return;
  }
#pragma omp parallel for schedule(dynamic, chunk)
  for (int row = 0; row < rows; ++row) f(omp_get_thread_num(), row);
}

}  // namespace gecd::cpu_matmul
