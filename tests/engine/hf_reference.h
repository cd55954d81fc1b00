#ifndef GECD_TESTS_ENGINE_HF_REFERENCE_H_
#define GECD_TESTS_ENGINE_HF_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine_test_util.h"
#include "gtest/gtest.h"

// The Hugging Face comparison of tools/gpu/hf_reference.py's random models (docs/GPU.md, "The
// Hugging Face check"): where the models are, logits at their reference positions from a backend,
// and the error / top-1 measures with one summary line per comparison.
namespace gecd::engine::testing {

// FP8 against HF's f32 logits is the quantization error itself: reported, and bounded only
// against a broken quantizer, not a numerical drift.
inline constexpr double kFp8VsF32Tol = 3e-1;

// A model directory's name, for the summary lines.
inline std::string ModelName(const std::string& dir) {
  return std::filesystem::path(dir).filename().string();
}

// The model directories GECD_HF_REFERENCE_DIR names: itself when it holds
// reference_logits.json, else each such subdirectory (sorted). Empty when the variable is unset.
inline std::vector<std::string> HfReferenceDirs() {
  const char* env = std::getenv("GECD_HF_REFERENCE_DIR");
  if (env == nullptr || *env == '\0') return {};
  namespace fs = std::filesystem;
  const fs::path root(env);
  if (fs::exists(root / "reference_logits.json")) return {root.string()};
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (fs::exists(entry.path() / "reference_logits.json")) dirs.push_back(entry.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  EXPECT_FALSE(dirs.empty()) << "GECD_HF_REFERENCE_DIR=" << env
                             << " holds no reference_logits.json (make it with "
                                "tools/gpu/hf_reference.py)";
  return dirs;
}

// The backend's logits at every reference position, in the reference's order: all prompts in
// one prefill step up to their first position, then one decode step per further position (the
// positions of a case must be consecutive), so the KV cache is exercised as in serving.
inline std::vector<std::vector<float>> LogitsAtPositions(Backend* backend,
                                                         const std::vector<ReferenceCase>& cases) {
  BackendDriver driver(backend);
  std::vector<std::vector<std::vector<float>>> per_case(cases.size());
  std::vector<std::pair<int, int>> chunks;
  for (const ReferenceCase& c : cases) {
    EXPECT_FALSE(c.positions.empty());
    if (c.positions.empty()) return {};
    for (size_t k = 1; k < c.positions.size(); ++k) {
      EXPECT_EQ(c.positions[k], c.positions[k - 1] + 1) << "positions must be consecutive";
      if (c.positions[k] != c.positions[k - 1] + 1) return {};
    }
    EXPECT_LT(c.positions.back(), static_cast<int>(c.prompt.size()));
    chunks.push_back({driver.Add(c.prompt), c.positions[0] + 1});
  }
  for (size_t step = 0; !chunks.empty(); ++step) {
    const auto logits = driver.Step(chunks);
    if (logits.size() != chunks.size()) return {};  // the step failed (reported by the driver)
    std::vector<std::pair<int, int>> next;
    for (size_t k = 0; k < chunks.size(); ++k) {
      const int index = chunks[k].first;
      per_case[index].push_back(logits[k]);
      if (per_case[index].size() < cases[index].positions.size()) next.push_back({index, 1});
    }
    chunks = std::move(next);
  }
  std::vector<std::vector<float>> out;
  for (auto& logits : per_case) {
    for (auto& l : logits) out.push_back(std::move(l));
  }
  return out;
}

inline std::vector<std::vector<float>> ReferenceLogits(const std::vector<ReferenceCase>& cases) {
  std::vector<std::vector<float>> out;
  for (const ReferenceCase& c : cases) out.insert(out.end(), c.logits.begin(), c.logits.end());
  return out;
}

// Top-1 agreement is checked where the expected top-1 leads its runner-up by more than
// kDecisiveMargin of max|logit|: a random model's top two logits are often closer than any
// rounding (32000 Gaussian logits: the lead is ~1/4 std), and a flip there says nothing.
// 1e-2 is the typical, not the worst, bf16 drift, so the check is not implied by the error bound.
constexpr double kDecisiveMargin = 1e-2;

struct HfComparison {
  int positions = 0;
  int top1_agree = 0;
  int decisive = 0;            // positions whose expected top-1 leads by more than kDecisiveMargin
  int decisive_agree = 0;      // of those, where the top-1 agrees
  double max_rel_error = 0.0;  // RelativeError per position, worst over positions
};

inline HfComparison CompareLogits(const std::vector<std::vector<float>>& got,
                                  const std::vector<std::vector<float>>& expected) {
  HfComparison c;
  EXPECT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < std::min(got.size(), expected.size()); ++i) {
    const std::vector<float>& e = expected[i];
    ++c.positions;
    c.max_rel_error = std::max(c.max_rel_error, RelativeError(got[i], e));
    const int32_t top = Argmax(e);
    const bool agree = Argmax(got[i]) == top;
    c.top1_agree += agree;
    float runner_up = -INFINITY, scale = 0.0f;
    for (size_t j = 0; j < e.size(); ++j) {
      if (static_cast<int32_t>(j) != top) runner_up = std::max(runner_up, e[j]);
      scale = std::max(scale, std::abs(e[j]));
    }
    if (e[top] - runner_up > kDecisiveMargin * scale) {
      ++c.decisive;
      c.decisive_agree += agree;
    }
  }
  return c;
}

// Prints "hf-check: <what>: max rel error E (tol T), top-1 A/N, decisive D/M (P%, min Q%)
// PASS|FAIL" (the line scripts/gpu_hf_check.sh collects) and fails the test when a bound is
// missed, nothing was compared, or under a quarter of the positions were decisive (too
// ill-conditioned a model to check top-1 on). `min_top1` <= 0: top-1 is reported, not checked.
inline void ExpectWithin(const std::string& what, const HfComparison& c, double tolerance,
                         double min_top1) {
  const double top1 = c.decisive > 0 ? static_cast<double>(c.decisive_agree) / c.decisive : 0.0;
  const bool enough = c.positions > 0 && (min_top1 <= 0 || 4 * c.decisive >= c.positions);
  const bool pass = enough && c.max_rel_error <= tolerance && top1 >= min_top1;
  std::printf(
      "hf-check: %s: max rel error %.3g (tol %.1e), top-1 %d/%d, decisive %d/%d "
      "(%.1f%%, min %.0f%%) %s\n",
      what.c_str(), c.max_rel_error, tolerance, c.top1_agree, c.positions, c.decisive_agree,
      c.decisive, 100.0 * top1, 100.0 * std::max(min_top1, 0.0), pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  EXPECT_GT(c.positions, 0) << what << ": no position compared";
  if (min_top1 > 0) {
    EXPECT_GE(4 * c.decisive, c.positions) << what << ": too few decisive positions";
  }
  EXPECT_LE(c.max_rel_error, tolerance) << what;
  EXPECT_GE(top1, min_top1) << what;
}

}  // namespace gecd::engine::testing

#endif  // GECD_TESTS_ENGINE_HF_REFERENCE_H_
