// The cpu backend with engine.quantization int8 (every Linear through cpu_matmul's oneDNN
// int8 matmul) against the f32 backend, its oracle: logits within a stated bound on the
// reference fixtures, the default model's greedy choices nearly always the same; FP8
// checkpoints load too; what it refuses. Skipped in a build without oneDNN.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/cpu_backend.h"
#include "engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "onednn_test_util.h"
#include "testing/cpu_features.h"
#include "testing/scoped_temp_dir.h"
#include "testing/test_paths.h"

namespace gecd::engine {
namespace {

using ::testing::HasSubstr;
using testing::Open;

// W8A8 with per-channel weights and per-token activations: each Linear is off by ~1% of its
// output's scale (cpu_matmul's tests bound it exactly); through the fixtures' 2 to 3 random
// layers and lm_head the logits measure 0.046 (ref-qwen2) and 0.052 (ref-llama) relative to
// f32, on any VNNI kernel (the int32 sums are exact). A wrong scale or layout is off by O(1).
constexpr double kInt8Bound = 0.08;

CpuBackendOptions Int8(std::string isa = "auto") {
  CpuBackendOptions o;
  o.int8 = true;
  o.cpu_isa = std::move(isa);
  o.num_kv_blocks = 256;
  return o;
}

// The engine refuses int8 on a CPU without VNNI (cpu_matmul/matmul.h: its sums would saturate);
// a test of what it computes has nothing to run there.
#define SKIP_WITHOUT_VNNI()                                                            \
  if (!::gecd::testing::CpuHasVnni()) {                                                \
    GTEST_SKIP() << "no AVX512-VNNI or AVX-VNNI here: int8 is refused (a test below)"; \
  }

// The worst relative error of int8 against f32 over the prompts of `fixture`'s reference.
double WorstAgainstF32(const std::string& fixture, const std::string& isa = "auto") {
  return testing::WorstAgainstF32(fixture, Int8(isa), "int8");
}

TEST(CpuInt8Test, FixtureLogitsMatchTheF32Oracle) {
  SKIP_WITHOUT_VNNI();
  for (const char* fixture : {"ref-llama-f32", "ref-qwen2-f32"}) {  // qwen2: q/k/v biases
    const double worst = WorstAgainstF32(fixture);
    if (worst < 0) GTEST_SKIP() << "built without oneDNN";
    EXPECT_LT(worst, kInt8Bound) << fixture;
    EXPECT_GT(worst, 1e-4) << fixture << ": the int8 path seems not taken";
  }
}

// The engine asks for no logits, and the backend then takes lm_head's rows straight to the
// argmax (cpu_backend.cc): the same tokens as the argmax of the logits it returns when asked.
TEST(CpuInt8Test, TokensChosenWithoutLogitsAreTheLogitsArgmax) {
  SKIP_WITHOUT_VNNI();
  for (const char* fixture : {"ref-llama-f32", "ref-qwen2-f32"}) {
    const int compared = testing::TokensWithoutLogitsAreTheLogitsArgmax(fixture, Int8());
    if (compared == 0 && !HasFailure()) GTEST_SKIP() << "built without oneDNN";
    EXPECT_EQ(compared, 16 * 16) << fixture;
  }
}

TEST(CpuInt8Test, AnFp8CheckpointIsDequantizedAndRequantized) {
  SKIP_WITHOUT_VNNI();
  // Its e4m3 weights times their scales, quantized again per channel, against the FP8
  // emulation the f32 backend runs: the activations differ (int8 per token against e4m3, whose
  // 3-bit mantissa alone puts 0.11 to 0.26 between FP8 and f32: fp8_forward_test), so this
  // measures 0.14; a lost or doubled scale is off by O(1).
  const double worst = WorstAgainstF32("ref-llama-fp8");
  if (worst < 0) GTEST_SKIP() << "built without oneDNN";
  EXPECT_LT(worst, 0.3);
}

TEST(CpuInt8Test, TheDefaultModelMostlyChoosesAsF32Does) {
  SKIP_WITHOUT_VNNI();
  const testing::Agreement a = testing::DefaultModelAgainstF32(Int8());
  if (a.skipped) GTEST_SKIP() << "no default model, or built without oneDNN";
  // Random tokens are far from the text it was trained on, so its logits are flatter than on
  // sentences: measured 0.114 and 367 / 384 (on JFLEG dev's sentences, 746 / 754 outputs are
  // identical: bench/RESULTS.md).
  EXPECT_LT(a.worst, 0.2);
  EXPECT_GE(a.same, a.total * 92 / 100);
}

// Copies ref-llama-fp8 into `dir` with k_proj's scale `row` of layer 0 set to `value`.
void WriteWithScale(const std::string& dir, float value) {
  const std::string from = gecd::testing::FixturePath("models/ref-llama-fp8");
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
    std::filesystem::copy_file(from + "/" + f, dir + "/" + f);
  }
  std::fstream file(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_size = 0;
  file.read(reinterpret_cast<char*>(&header_size), sizeof(header_size));
  std::string header(header_size, '\0');
  file.read(header.data(), static_cast<std::streamsize>(header_size));
  const auto j = nlohmann::json::parse(header);
  const uint64_t offset =
      j.at("model.layers.0.self_attn.k_proj.weight_scale").at("data_offsets")[0].get<uint64_t>();
  file.seekp(static_cast<std::streamoff>(8 + header_size + offset + 5 * sizeof(float)));
  file.write(reinterpret_cast<const char*>(&value), sizeof(value));
  ASSERT_TRUE(file.good());
}

TEST(CpuInt8Test, ZeroNegativeOrNonFiniteFp8ScalesAreRefusedNamingTheTensor) {
  for (float bad : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    gecd::testing::ScopedTempDir dir;
    WriteWithScale(dir.path(), bad);
    auto checkpoint = Open(dir.path());
    ASSERT_NE(checkpoint, nullptr);
    for (bool int8 : {false, true}) {                        // the f32 oracle refuses them as well
      if (int8 && !::gecd::testing::CpuHasVnni()) continue;  // refused for want of VNNI first
      CpuBackendOptions options = Int8();
      options.int8 = int8;
      absl::StatusOr<std::unique_ptr<CpuBackend>> b = CpuBackend::Create(*checkpoint, options);
      ASSERT_FALSE(b.ok()) << bad;
      if (absl::StrContains(b.status().message(), "without oneDNN")) continue;
      EXPECT_THAT(b.status().message(),
                  HasSubstr("model.layers.0.self_attn.k_proj.weight_scale: scale 5 is"));
    }
  }
}

// Both of these fix oneDNN's ISA, which a process does once: each runs in a child.
TEST(CpuInt8Test, Int8WithoutVnniIsRefusedNamingTheKey) {
  EXPECT_EXIT(
      {
        auto checkpoint = Open(gecd::testing::FixturePath("models/ref-llama-f32"));
        absl::StatusOr<std::unique_ptr<CpuBackend>> b =
            CpuBackend::Create(*checkpoint, Int8("avx512_core"));
        const std::string m(b.status().message());
        if (m.find("without oneDNN") != std::string::npos) std::exit(0);
        // avx512_core has no VNNI; a CPU without AVX-512 refuses the ceiling itself.
        const bool ok = !b.ok() && b.status().code() == absl::StatusCode::kFailedPrecondition &&
                        (m.find("engine.quantization: int8 needs VNNI") == 0 ||
                         m.find("engine.cpu_isa: avx512_core") == 0);
        if (!ok) std::fprintf(stderr, "%s\n", m.c_str());
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CpuInt8Test, TheAvxVnniKernelsMatchTheOracleToo) {
  if (!::gecd::testing::CpuHasAvxVnni()) GTEST_SKIP() << "no AVX-VNNI here";
  // A fresh process, not a fork: OpenBLAS's thread pool does not survive fork().
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const double worst = WorstAgainstF32("ref-llama-f32", "avx2_vnni");
        std::exit(worst < kInt8Bound && !::testing::Test::HasFailure() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gecd::engine
