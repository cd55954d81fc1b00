#ifndef GECD_TESTS_ENGINE_ONEDNN_TEST_UTIL_H_
#define GECD_TESTS_ENGINE_ONEDNN_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "engine/cpu_backend.h"
#include "engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

// Shared by the tests of the cpu backend's oneDNN paths (cpu_int8_test, cpu_bf16_test): each
// runs the backend in its precision against the f32 backend, its oracle, on the reference
// fixtures' prompts and on the default model.
namespace gecd::engine::testing {

// The backend, or nullptr with *skip set when this build has no oneDNN.
inline std::unique_ptr<CpuBackend> CreateOrSkip(const model::Checkpoint& checkpoint,
                                                const CpuBackendOptions& options, bool* skip) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> b = CpuBackend::Create(checkpoint, options);
  *skip = !b.ok() && absl::StrContains(b.status().message(), "without oneDNN");
  if (!*skip) {
    EXPECT_TRUE(b.ok()) << b.status();
  }
  return b.ok() ? *std::move(b) : nullptr;
}

inline std::unique_ptr<model::Checkpoint> Open(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<model::Checkpoint>> c = model::Checkpoint::Open(dir);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// Each prompt's last logits from `backend`, fed in chunks of 5 tokens, all prompts per step.
inline std::vector<std::vector<float>> LastLogits(
    Backend* backend, const std::vector<std::vector<int32_t>>& prompts) {
  BackendDriver driver(backend);
  for (const auto& p : prompts) driver.Add(p);
  return driver.RunAll(/*chunk=*/5);
}

// The worst relative error of `options`' backend against the f32 one over the reference
// prompts, on `fixture`; -1 when this build has no oneDNN. `expect` is a substring of the
// backend's Describe() (its precision).
inline double WorstAgainstF32(const std::string& fixture, const CpuBackendOptions& options,
                              const std::string& expect) {
  auto checkpoint = Open(gecd::testing::FixturePath("models/" + fixture));
  if (checkpoint == nullptr) return 1.0;
  bool skip = false;
  auto tested = CreateOrSkip(*checkpoint, options, &skip);
  if (skip) return -1.0;
  if (tested == nullptr) return 1.0;
  EXPECT_THAT(tested->Describe(), ::testing::HasSubstr(expect));
  auto f32 = LoadModel(gecd::testing::FixturePath("models/" + fixture));
  if (f32.backend == nullptr) return 1.0;
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : LoadReference("ref-llama-f32")) prompts.push_back(c.prompt);
  const auto got = LastLogits(tested.get(), prompts);
  const auto want = LastLogits(f32.backend.get(), prompts);
  double worst = 0.0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    worst = std::max(worst, RelativeError(got[i], want[i]));
  }
  std::printf("[ %s, %s, cpu_isa %s ] vs f32 logits: max relative error %.3g\n", fixture.c_str(),
              expect.c_str(), options.cpu_isa.c_str(), worst);
  return worst;
}

struct Agreement {
  bool skipped = false;  // no default model, or no oneDNN
  double worst = 0.0;    // relative error of the logits
  int same = 0;          // positions whose argmax agrees
  int total = 0;
};

// The default model under `options` against f32: 16 random token sequences of 24 (JFLEG's mean
// prompt), every position's logits compared.
inline Agreement DefaultModelAgainstF32(const CpuBackendOptions& options) {
  Agreement a;
  const std::string dir = gecd::testing::SourceDir() + "/models/gecd-gec-small";
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    a.skipped = true;
    return a;
  }
  auto checkpoint = Open(dir);
  if (checkpoint == nullptr) return a;
  auto tested = CreateOrSkip(*checkpoint, options, &a.skipped);
  if (tested == nullptr) return a;
  auto f32 = LoadModel(dir);
  if (f32.backend == nullptr) return a;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> id(3, checkpoint->config().vocab_size - 1);
  BackendDriver x(tested.get()), y(f32.backend.get());
  for (int s = 0; s < 16; ++s) {
    std::vector<int32_t> p(24);
    for (int32_t& t : p) t = id(rng);
    x.Add(p);
    y.Add(p);
  }
  for (int pos = 0; pos < 24; ++pos) {
    std::vector<std::pair<int, int>> chunks;
    for (int s = 0; s < 16; ++s) chunks.push_back({s, 1});
    const auto got = x.Step(chunks);
    const auto want = y.Step(chunks);
    for (int s = 0; s < 16; ++s) {
      a.worst = std::max(a.worst, RelativeError(got[s], want[s]));
      a.same += Argmax(got[s]) == Argmax(want[s]);
      ++a.total;
    }
  }
  std::printf("default model, %s vs f32: max relative error %.3g, argmax agrees %d / %d\n",
              tested->Describe().c_str(), a.worst, a.same, a.total);
  return a;
}

// Whether `options`' backend chooses, when asked for no logits (the engine's way: the matmul's
// rows go straight to the argmax), the argmax of the logits it returns when asked: two
// backends fed the same 16 random sequences of 24 tokens on the fixture `fixture`, in chunks
// of 5 (prefill) and then of 1. Returns the positions compared; 0 when skipped.
inline int TokensWithoutLogitsAreTheLogitsArgmax(const std::string& fixture,
                                                 const CpuBackendOptions& options) {
  auto checkpoint = Open(gecd::testing::FixturePath("models/" + fixture));
  if (checkpoint == nullptr) return 0;
  bool skip = false;
  auto with_logits = CreateOrSkip(*checkpoint, options, &skip);
  auto without = CreateOrSkip(*checkpoint, options, &skip);
  if (with_logits == nullptr || without == nullptr) return 0;
  std::mt19937 rng(2);
  std::uniform_int_distribution<int32_t> id(3, checkpoint->config().vocab_size - 1);
  BackendDriver x(with_logits.get()), y(without.get());
  for (int s = 0; s < 16; ++s) {
    std::vector<int32_t> p(24);
    for (int32_t& t : p) t = id(rng);
    x.Add(p);
    y.Add(p);
  }
  int compared = 0;
  for (int fed = 0; fed < 24;) {
    const int chunk = fed < 10 ? 5 : 1;
    std::vector<std::pair<int, int>> chunks;
    for (int s = 0; s < 16; ++s) chunks.push_back({s, chunk});
    const auto logits = x.Step(chunks);
    const std::vector<int32_t> tokens = y.StepTokens(chunks);
    EXPECT_EQ(tokens.size(), logits.size());
    for (size_t s = 0; s < logits.size() && s < tokens.size(); ++s) {
      EXPECT_EQ(tokens[s], Argmax(logits[s])) << "sequence " << s << " after " << fed;
      ++compared;
    }
    fed += chunk;
  }
  return compared;
}

}  // namespace gecd::engine::testing

#endif  // GECD_TESTS_ENGINE_ONEDNN_TEST_UTIL_H_
