#ifndef GECD_TESTS_ENGINE_HF_REFERENCE_H_
#define GECD_TESTS_ENGINE_HF_REFERENCE_H_

#include <algorithm>
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
    if (::testing::Test::HasFailure() || logits.size() != chunks.size()) return {};
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

struct HfComparison {
  int positions = 0;
  int top1_agree = 0;
  double max_rel_error = 0.0;  // RelativeError per position, worst over positions
};

inline HfComparison CompareLogits(const std::vector<std::vector<float>>& got,
                                  const std::vector<std::vector<float>>& expected) {
  HfComparison c;
  EXPECT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < std::min(got.size(), expected.size()); ++i) {
    ++c.positions;
    c.max_rel_error = std::max(c.max_rel_error, RelativeError(got[i], expected[i]));
    c.top1_agree += Argmax(got[i]) == Argmax(expected[i]);
  }
  return c;
}

// Prints "hf-check: <what>: max rel error E (tol T), top-1 A/N (P%, min M%) PASS|FAIL" (the line
// scripts/gpu_hf_check.sh collects) and fails the test when a bound is missed or nothing was
// compared. `min_top1` <= 0: top-1 agreement is reported, not checked.
inline void ExpectWithin(const std::string& what, const HfComparison& c, double tolerance,
                         double min_top1) {
  const double top1 = c.positions > 0 ? static_cast<double>(c.top1_agree) / c.positions : 0.0;
  const bool pass = c.positions > 0 && c.max_rel_error <= tolerance && top1 >= min_top1;
  std::printf("hf-check: %s: max rel error %.3g (tol %.1e), top-1 %d/%d (%.1f%%, min %.0f%%) %s\n",
              what.c_str(), c.max_rel_error, tolerance, c.top1_agree, c.positions, 100.0 * top1,
              100.0 * std::max(min_top1, 0.0), pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  EXPECT_GT(c.positions, 0) << what << ": no position compared";
  EXPECT_LE(c.max_rel_error, tolerance) << what;
  EXPECT_GE(top1, min_top1) << what;
}

}  // namespace gecd::engine::testing

#endif  // GECD_TESTS_ENGINE_HF_REFERENCE_H_
