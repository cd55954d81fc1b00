// The cpu backend with bf16 matmuls (engine.cpu_matmul bf16, or auto on a CPU with AVX512-BF16
// or AMX-BF16: every Linear through cpu_matmul's oneDNN bf16 matmul) against the f32 backend,
// its oracle: logits within a stated bound on the reference fixtures, the default model's
// greedy choices nearly always the same; FP8 checkpoints keep their FP8 emulation; auto's
// choice and fallback, and what is refused. The bf16 cases skip on a CPU without BF16 dot
// products and in a build without oneDNN (the sanitizer builds).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/cpu_backend.h"
#include "engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onednn_test_util.h"
#include "testing/cpu_features.h"
#include "testing/test_paths.h"

namespace gecd::engine {
namespace {

using ::testing::HasSubstr;
using testing::Open;

// bf16 rounds every weight and activation by at most 2^-9 relative (2^-8 for a product), with
// f32 sums: through the fixtures' 2 to 3 random layers and lm_head the logits measure 0.0136
// (ref-llama) and 0.0094 (ref-qwen2) relative to f32 with oneDNN's brg:avx512_core_bf16 kernel
// (AMD Zen 5; another kernel only sums in another order). int8 measures 0.046-0.052 on the
// same fixtures; a wrong layout, scale or lost bias is off by O(1).
constexpr double kBf16Bound = 0.03;

CpuBackendOptions Bf16(CpuMatmul matmul = CpuMatmul::kBf16, std::string isa = "auto") {
  CpuBackendOptions o;
  o.matmul = matmul;
  o.cpu_isa = std::move(isa);
  o.num_kv_blocks = 256;
  return o;
}

#define SKIP_WITHOUT_BF16()                                         \
  if (!::gecd::testing::CpuHasBf16()) {                             \
    GTEST_SKIP() << "no AVX512-BF16 or AMX-BF16 here: f32 is used"; \
  }

TEST(CpuBf16Test, FixtureLogitsMatchTheF32Oracle) {
  SKIP_WITHOUT_BF16();
  for (const char* fixture : {"ref-llama-f32", "ref-qwen2-f32"}) {  // qwen2: q/k/v biases
    const double worst = testing::WorstAgainstF32(fixture, Bf16(), "bf16 matmuls");
    if (worst < 0) GTEST_SKIP() << "built without oneDNN";
    EXPECT_LT(worst, kBf16Bound) << fixture;
    EXPECT_GT(worst, 1e-5) << fixture << ": the bf16 path seems not taken";
  }
}

// The engine asks for no logits, and the backend then takes lm_head's rows straight to the
// argmax (cpu_backend.cc): the same tokens as the argmax of the logits it returns when asked.
TEST(CpuBf16Test, TokensChosenWithoutLogitsAreTheLogitsArgmax) {
  SKIP_WITHOUT_BF16();
  for (const char* fixture : {"ref-llama-f32", "ref-qwen2-f32"}) {
    const int compared = testing::TokensWithoutLogitsAreTheLogitsArgmax(fixture, Bf16());
    if (compared == 0 && !HasFailure()) GTEST_SKIP() << "built without oneDNN";
    EXPECT_EQ(compared, 16 * 16) << fixture;
  }
}

TEST(CpuBf16Test, AnFp8CheckpointKeepsItsFp8LayersEmulated) {
  // Its FP8 layers stay the exact emulation the f32 backend runs (the cuda kernels' oracle);
  // only what is not FP8 (lm_head) runs in bf16, so the logits stay close to the emulation's
  // (measured 0.0038).
  SKIP_WITHOUT_BF16();
  const double worst =
      testing::WorstAgainstF32("ref-llama-fp8", Bf16(), "FP8 layers emulated in f32");
  if (worst < 0) GTEST_SKIP() << "built without oneDNN";
  EXPECT_LT(worst, kBf16Bound);
}

TEST(CpuBf16Test, TheDefaultModelNearlyAlwaysChoosesAsF32Does) {
  SKIP_WITHOUT_BF16();
  const testing::Agreement a = testing::DefaultModelAgainstF32(Bf16());
  if (a.skipped) GTEST_SKIP() << "no default model, or built without oneDNN";
  // Random tokens, as in the int8 test (int8: 0.114 and 367 / 384); bf16 measured 0.012 and
  // 381 / 384 (on JFLEG dev's sentences: bench/RESULTS.md).
  EXPECT_LT(a.worst, 0.05);
  EXPECT_GE(a.same, a.total * 97 / 100);
}

TEST(CpuBf16Test, Bf16WithInt8IsRefusedNamingBothKeys) {
  CpuBackendOptions o = Bf16();
  o.int8 = true;
  auto checkpoint = Open(gecd::testing::FixturePath("models/ref-llama-f32"));
  ASSERT_NE(checkpoint, nullptr);
  absl::StatusOr<std::unique_ptr<CpuBackend>> b = CpuBackend::Create(*checkpoint, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(),
              HasSubstr("engine.cpu_matmul: bf16 with engine.quantization: int8"));
}

// The rest fix oneDNN's ISA, which a process does once: each runs in a fresh child process
// (not a fork: OpenBLAS's thread pool does not survive fork()). The child prints why it failed.
[[noreturn]] void Finish(bool ok, const std::string& why) {
  if (!ok) std::fprintf(stderr, "%s\n", why.c_str());
  std::exit(ok ? 0 : 1);
}

// The backend for `options` on ref-llama-f32, its Describe() or its error.
absl::StatusOr<std::string> DescribeWith(const CpuBackendOptions& options) {
  auto checkpoint = Open(gecd::testing::FixturePath("models/ref-llama-f32"));
  if (checkpoint == nullptr) return absl::InternalError("no fixture");
  absl::StatusOr<std::unique_ptr<CpuBackend>> b = CpuBackend::Create(*checkpoint, options);
  if (!b.ok()) return b.status();
  return (*b)->Describe();
}

TEST(CpuBf16Test, AutoRunsBf16WhereTheCpuHasIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        absl::StatusOr<std::string> what = DescribeWith(Bf16(CpuMatmul::kAuto));
        if (!what.ok()) Finish(false, std::string(what.status().message()));
        std::printf("engine backend: %s\n", what->c_str());
        if (what->find("oneDNN ISA") == std::string::npos) {  // built without oneDNN
          Finish(
              what->find("cpu, f32 matmuls: OpenBLAS ") == 0 &&
                  what->find("engine.cpu_matmul auto: built without oneDNN") != std::string::npos,
              *what);
        }
        if (::gecd::testing::CpuHasBf16()) {
          Finish(what->find("cpu, bf16 matmuls: oneDNN ") == 0, *what);
        }
        Finish(what->find("cpu, f32 matmuls: OpenBLAS ") == 0 &&
                   what->find("engine.cpu_matmul auto: no BF16 dot products") != std::string::npos,
               *what);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CpuBf16Test, AutoFallsBackToF32BelowBf16AndSaysWhy) {
  // engine.cpu_isa below BF16 (avx512_core_vnni, or avx2 without AVX-512): what a CPU without
  // BF16 gets, and what CI runs to exercise that path on one with it.
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 here";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string isa = __builtin_cpu_supports("avx512f") ? "avx512_core" : "avx2";
  EXPECT_EXIT(
      {
        absl::StatusOr<std::string> what = DescribeWith(Bf16(CpuMatmul::kAuto, isa));
        if (!what.ok()) {
          const std::string m(what.status().message());
          Finish(m.find("without oneDNN") != std::string::npos, m);
        }
        Finish(what->find("cpu, f32 matmuls: OpenBLAS ") == 0 &&
                   what->find("engine.cpu_matmul auto: no BF16 dot products under "
                              "engine.cpu_isa " +
                              isa) != std::string::npos,
               *what);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CpuBf16Test, Bf16WithoutBf16IsRefusedNamingTheKey) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 here";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        absl::StatusOr<std::string> what = DescribeWith(Bf16(CpuMatmul::kBf16, "avx2"));
        const std::string m(what.status().message());
        if (m.find("without oneDNN") != std::string::npos) std::exit(0);
        Finish(!what.ok() && what.status().code() == absl::StatusCode::kFailedPrecondition &&
                   m.find("engine.cpu_matmul: bf16 needs AVX512-BF16 or AMX-BF16") == 0,
               what.ok() ? *what : m);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gecd::engine
