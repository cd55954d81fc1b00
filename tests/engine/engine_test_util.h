#ifndef GECD_TESTS_ENGINE_ENGINE_TEST_UTIL_H_
#define GECD_TESTS_ENGINE_ENGINE_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu_backend.h"
#include "engine/kv_cache.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "testing/test_paths.h"

// Shared by the engine tests: the reference logits written by
// tools/fixtures/make_reference_models.py, the error measure, and a minimal driver that feeds
// token chunks straight to a Backend.
namespace gecd::engine::testing {

// max_i |a_i - b_i| / max_i |b_i|: the error relative to the reference vector's scale, so
// near-zero logits do not dominate the way an element-wise relative error would.
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0;
  double scale = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

inline int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

struct ReferenceCase {
  std::vector<int32_t> prompt;
  std::vector<int> positions;
  std::vector<std::vector<float>> logits;  // per position
  std::vector<int32_t> greedy;
  std::vector<float> greedy_logits;
};

// A reference file at `path`; "greedy" and "greedy_logits" are optional (tools/gpu/
// hf_reference.py writes only logits at positions). Empty, with a test failure, when unreadable.
inline std::vector<ReferenceCase> LoadReferenceFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  if (!in.good()) return {};
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<ReferenceCase> cases;
  for (const auto& c : j.at("cases")) {
    ReferenceCase r{c.at("prompt").get<std::vector<int32_t>>(),
                    c.at("positions").get<std::vector<int>>(),
                    c.at("logits").get<std::vector<std::vector<float>>>(),
                    {},
                    {}};
    if (c.contains("greedy")) r.greedy = c.at("greedy").get<std::vector<int32_t>>();
    if (c.contains("greedy_logits")) {
      r.greedy_logits = c.at("greedy_logits").get<std::vector<float>>();
    }
    cases.push_back(std::move(r));
  }
  return cases;
}

inline std::vector<ReferenceCase> LoadReference(const std::string& model,
                                                const std::string& file = "reference_logits.json") {
  return LoadReferenceFile(gecd::testing::FixturePath("models/" + model + "/" + file));
}

struct LoadedModel {
  std::unique_ptr<model::Checkpoint> checkpoint;
  std::unique_ptr<CpuBackend> backend;
};

inline LoadedModel LoadModel(const std::string& dir, CpuBackendOptions options = {}) {
  LoadedModel m;
  auto checkpoint = model::Checkpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  if (!checkpoint.ok()) return m;
  m.checkpoint = std::move(*checkpoint);
  if (options.num_kv_blocks == 0) options.num_kv_blocks = 256;
  auto backend = CpuBackend::Create(*m.checkpoint, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (backend.ok()) m.backend = std::move(*backend);
  return m;
}

inline LoadedModel LoadFixtureModel(const std::string& name, CpuBackendOptions options = {}) {
  return LoadModel(gecd::testing::FixturePath("models/" + name), std::move(options));
}

// Feeds whole token sequences to a backend in chunks, every sequence in the same steps, with
// its own block table from one pool; records the logits each step produces.
class BackendDriver {
 public:
  explicit BackendDriver(Backend* backend)
      : backend_(backend),
        pool_(backend->kv_layout().num_blocks, backend->kv_layout().block_size) {}

  int Add(std::vector<int32_t> tokens) {
    seqs_.push_back({std::move(tokens), 0, BlockTable(&pool_), {}});
    return static_cast<int>(seqs_.size()) - 1;
  }

  // Feeds the next `count` tokens of each listed sequence as one step; each samples at the end
  // of its chunk. Returns the logits per listed sequence, and keeps them as its `last`.
  std::vector<std::vector<float>> Step(const std::vector<std::pair<int, int>>& chunks) {
    StepResult result;
    const absl::Status status = Forward(chunks, /*return_logits=*/true, &result);
    const int vocab = backend_->config().vocab_size;
    std::vector<std::vector<float>> out;
    for (size_t k = 0; k < chunks.size() && status.ok(); ++k) {
      out.emplace_back(result.logits.begin() + k * vocab, result.logits.begin() + (k + 1) * vocab);
      EXPECT_EQ(result.next_tokens[k], Argmax(out.back()));
      seqs_[chunks[k].first].last = out.back();
    }
    return out;
  }

  // As Step, without asking for logits (as the engine runs): the tokens the backend chose.
  std::vector<int32_t> StepTokens(const std::vector<std::pair<int, int>>& chunks) {
    StepResult result;
    const absl::Status status = Forward(chunks, /*return_logits=*/false, &result);
    EXPECT_TRUE(result.logits.empty());
    return status.ok() ? result.next_tokens : std::vector<int32_t>();
  }

  // Feeds everything in steps of at most `chunk` tokens per sequence; returns each sequence's
  // logits at its final position.
  std::vector<std::vector<float>> RunAll(int chunk) {
    for (;;) {
      std::vector<std::pair<int, int>> chunks;
      for (size_t i = 0; i < seqs_.size(); ++i) {
        const int left = static_cast<int>(seqs_[i].tokens.size()) - seqs_[i].fed;
        if (left > 0) chunks.push_back({static_cast<int>(i), std::min(left, chunk)});
      }
      if (chunks.empty()) break;
      Step(chunks);
      if (::testing::Test::HasFailure()) break;
    }
    std::vector<std::vector<float>> last;
    for (const Seq& s : seqs_) last.push_back(s.last);
    return last;
  }

  const KvBlockPool& pool() const { return pool_; }

 private:
  absl::Status Forward(const std::vector<std::pair<int, int>>& chunks, bool return_logits,
                       StepResult* result) {
    StepBatch batch;
    batch.return_logits = return_logits;
    for (auto [index, count] : chunks) {
      Seq& s = seqs_[index];
      EXPECT_TRUE(s.blocks.Reserve(s.fed + count));
      batch.Add(std::span<const int32_t>(s.tokens).subspan(s.fed, count), s.fed, s.blocks.blocks(),
                /*sample=*/true);
      s.fed += count;
    }
    const absl::Status status = backend_->Forward(batch, result);
    EXPECT_TRUE(status.ok()) << status;
    return status;
  }

  struct Seq {
    std::vector<int32_t> tokens;
    int fed;
    BlockTable blocks;
    std::vector<float> last;
  };
  Backend* backend_;
  KvBlockPool pool_;
  std::vector<Seq> seqs_;
};

}  // namespace gecd::engine::testing

#endif  // GECD_TESTS_ENGINE_ENGINE_TEST_UTIL_H_
