// The CPU backend against Hugging Face transformers on the random models
// tools/gpu/hf_reference.py writes (docs/GPU.md, "The Hugging Face check"): the pipeline of the
// GPU check proven without a GPU, and the calibration of its bounds. Runs only when
// GECD_HF_REFERENCE_DIR names such a model (or a directory of them); CI has no torch, so it
// skips there.
//
// Bounds: f32 against f32 differs only in summation order (kF32Tol). Against HF running
// natively in bf16, the error is bf16's own (every activation rounded to 8 mantissa bits) and
// top-1 flips where two logits are closer than that (kBf16NativeTol, kBf16NativeTop1). The FP8
// emulation against f32 HF is the quantization error of weights and activations, reported only
// under a loose bound (kFp8VsF32Tol) that catches a broken quantizer, not a numerical drift.
#include <filesystem>
#include <string>
#include <vector>

#include "engine/cpu_backend.h"
#include "engine_test_util.h"
#include "gtest/gtest.h"
#include "hf_reference.h"
#include "model/checkpoint.h"
#include "model/quantizer.h"
#include "testing/scoped_temp_dir.h"

namespace gecd::engine {
namespace {

using testing::CompareLogits;
using testing::ExpectWithin;
using testing::HfReferenceDirs;
using testing::kFp8VsF32Tol;
using testing::LoadModel;
using testing::LoadReferenceFile;
using testing::LogitsAtPositions;
using testing::ModelName;
using testing::ReferenceLogits;

constexpr double kF32Tol = 1e-4;
constexpr double kF32Top1 = 0.99;
constexpr double kBf16NativeTol = 6e-2;
constexpr double kBf16NativeTop1 = 0.95;

TEST(HfLogitsTest, CpuF32MatchesHf) {
  const auto dirs = HfReferenceDirs();
  if (dirs.empty()) GTEST_SKIP() << "GECD_HF_REFERENCE_DIR is unset (scripts/gpu_hf_check.sh)";
  for (const std::string& dir : dirs) {
    auto m = LoadModel(dir);
    ASSERT_NE(m.backend, nullptr) << dir;
    const auto reference = LoadReferenceFile(dir + "/reference_logits.json");
    const auto got = LogitsAtPositions(m.backend.get(), reference);
    ExpectWithin(ModelName(dir) + " cpu f32 vs HF f32",
                 CompareLogits(got, ReferenceLogits(reference)), kF32Tol, kF32Top1);
    const std::string bf16 = dir + "/reference_logits_bf16.json";
    if (std::filesystem::exists(bf16)) {
      ExpectWithin(ModelName(dir) + " cpu f32 vs HF bf16",
                   CompareLogits(got, ReferenceLogits(LoadReferenceFile(bf16))), kBf16NativeTol,
                   kBf16NativeTop1);
    }
  }
}

// `gecd quantize`'s checkpoint on the CPU backend (the FP8 oracle of the GPU check) against f32
// HF: proves the quantized copy of these shapes loads and stays near the model.
TEST(HfLogitsTest, CpuFp8NearHf) {
  const auto dirs = HfReferenceDirs();
  if (dirs.empty()) GTEST_SKIP() << "GECD_HF_REFERENCE_DIR is unset (scripts/gpu_hf_check.sh)";
  for (const std::string& dir : dirs) {
    gecd::testing::ScopedTempDir tmp;
    ASSERT_TRUE(model::QuantizeCheckpoint(dir, tmp.path() + "/fp8", {}).ok()) << dir;
    auto m = LoadModel(tmp.path() + "/fp8");
    ASSERT_NE(m.backend, nullptr) << dir;
    const auto reference = LoadReferenceFile(dir + "/reference_logits.json");
    ExpectWithin(
        ModelName(dir) + " cpu fp8 vs HF f32",
        CompareLogits(LogitsAtPositions(m.backend.get(), reference), ReferenceLogits(reference)),
        kFp8VsF32Tol, 0.0);
  }
}

}  // namespace
}  // namespace gecd::engine
