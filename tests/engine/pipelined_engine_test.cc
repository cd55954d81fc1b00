#include "engine/pipelined_engine.h"

#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "engine/engine_test_util.h"
#include "gtest/gtest.h"

namespace gecd::engine {
namespace {

using testing::LoadFixtureModel;

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params;
};

// Prompts of 1-40 tokens asking for 1-24 tokens, a third of them with a copy bias.
Workload RandomWorkload(int n, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  Workload w;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 40);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % vocab);
    GenerationParams p;
    p.max_new_tokens = 1 + static_cast<int>(rng() % 24);
    if (i % 3 == 0) {
      p.copy_bias = 3;
      p.copy_begin = 0;
      p.copy_end = static_cast<int>(prompt.size());
    }
    w.prompts.push_back(std::move(prompt));
    w.params.push_back(std::move(p));
  }
  return w;
}

std::map<SequenceId, std::vector<int32_t>> RunSynchronous(const Workload& w) {
  testing::LoadedModel model =
      LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 96});
  Engine engine(model.backend.get(), nullptr, {});
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    EXPECT_TRUE(engine.AddSequence(i, w.prompts[i], w.params[i]).ok());
  }
  std::map<SequenceId, std::vector<int32_t>> out;
  while (engine.HasWork()) {
    absl::StatusOr<std::vector<StepEvent>> events = engine.Step();
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) break;
    for (const StepEvent& e : *events) out[e.id].push_back(e.token);
  }
  return out;
}

TEST(PipelinedEngineTest, GivesTokenForTokenWhatTheSynchronousEngineGives) {
  testing::LoadedModel model =
      LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 96});
  ASSERT_NE(model.backend, nullptr);
  const Workload w = RandomWorkload(24, 7, model.checkpoint->config().vocab_size);
  const std::map<SequenceId, std::vector<int32_t>> want = RunSynchronous(w);

  PipelinedEngine engine(std::move(model.backend), nullptr, {});
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    ASSERT_TRUE(engine.Add(i, w.prompts[i], w.params[i]).ok());
  }
  std::map<SequenceId, std::vector<int32_t>> got;
  PipelinedEngine::StepOutcome outcome;
  int steps = 0;
  bool overlapped = false;  // a step started while another one's events came back
  while (engine.HasWork() && ++steps < 10000) {
    ASSERT_TRUE(engine.Step(&outcome).ok());
    overlapped = overlapped || (!outcome.ran.empty() && !outcome.events.empty());
    for (const StepEvent& e : outcome.events) got[e.id].push_back(e.token);
  }
  EXPECT_EQ(got, want);
  EXPECT_TRUE(overlapped);
  EXPECT_EQ(engine.engine().num_free_blocks(), engine.engine().num_blocks());
}

// The fixture model's pipelined engine (null when the fixture is missing).
std::unique_ptr<PipelinedEngine> FixtureEngine() {
  testing::LoadedModel model =
      LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 96});
  if (model.backend == nullptr) return nullptr;
  return std::make_unique<PipelinedEngine>(std::move(model.backend), nullptr, EngineOptions{});
}

// Exactly `n` new tokens, EOS or not.
GenerationParams ExactlyTokens(int n) {
  GenerationParams params;
  params.max_new_tokens = n;
  params.ignore_eos = true;
  return params;
}

TEST(PipelinedEngineTest, AFreedSequenceStopsAndItsBlocksReturn) {
  std::unique_ptr<PipelinedEngine> pipelined = FixtureEngine();
  ASSERT_NE(pipelined, nullptr);
  PipelinedEngine& engine = *pipelined;
  const GenerationParams long_run = ExactlyTokens(64);
  ASSERT_TRUE(engine.Add(1, {1, 2, 3}, long_run).ok());
  ASSERT_TRUE(engine.Add(2, {4, 5, 6}, long_run).ok());
  PipelinedEngine::StepOutcome outcome;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine.Step(&outcome).ok());  // 1 is in flight now
  ASSERT_TRUE(engine.Free(1).ok());
  std::map<SequenceId, int> tokens;
  while (engine.HasWork()) {
    ASSERT_TRUE(engine.Step(&outcome).ok());
    for (const StepEvent& e : outcome.events) ++tokens[e.id];
  }
  EXPECT_LE(tokens[1], 1);       // at most the step in flight when it was freed
  EXPECT_EQ(tokens[2] + 2, 64);  // two came back in the first three turns
  EXPECT_EQ(engine.engine().num_free_blocks(), engine.engine().num_blocks());
}

// What arrives while a step computes joins the step planned in the same turn, with drafts
// (where the turn waits for the step in flight before it plans the next) and without.
TEST(PipelinedEngineTest, ArrivalsJoinTheStepPlannedInTheSameTurn) {
  for (const int speculate : {0, 4}) {
    SCOPED_TRACE(speculate);
    testing::LoadedModel model =
        LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 96});
    ASSERT_NE(model.backend, nullptr);
    PipelinedEngine engine(std::move(model.backend), nullptr, {.speculate_tokens = speculate});
    ASSERT_TRUE(engine.Add(1, {1, 2, 3}, ExactlyTokens(8)).ok());
    PipelinedEngine::StepOutcome outcome;
    ASSERT_TRUE(engine.Step(&outcome).ok());  // 1's prefill is in flight
    int calls = 0;
    ASSERT_TRUE(engine
                    .Step(&outcome,
                          [&] {
                            ++calls;
                            ASSERT_TRUE(engine.Add(2, {4, 5}, ExactlyTokens(3)).ok());
                          })
                    .ok());
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(outcome.ran, (std::vector<SequenceId>{1, 2}));
    std::map<SequenceId, int> tokens;
    for (const StepEvent& e : outcome.events) ++tokens[e.id];
    while (engine.HasWork()) {
      ASSERT_TRUE(engine.Step(&outcome).ok());
      for (const StepEvent& e : outcome.events) ++tokens[e.id];
    }
    EXPECT_EQ(tokens[1], 8);
    EXPECT_EQ(tokens[2], 3);
  }
}

TEST(PipelinedEngineTest, EachTurnReportsTheSizeOfTheStepItCommitted) {
  std::unique_ptr<PipelinedEngine> pipelined = FixtureEngine();
  ASSERT_NE(pipelined, nullptr);
  PipelinedEngine& engine = *pipelined;
  const GenerationParams params = ExactlyTokens(4);
  ASSERT_TRUE(engine.Add(1, {1, 2, 3, 4, 5}, params).ok());
  ASSERT_TRUE(engine.Add(2, {6, 7}, params).ok());
  PipelinedEngine::StepOutcome outcome;
  // The first turn starts the prefill step and commits nothing.
  ASSERT_TRUE(engine.Step(&outcome).ok());
  EXPECT_EQ(outcome.ran.size(), 2u);
  EXPECT_EQ(outcome.committed_sequences, 0);
  // The second commits the prefill (5 + 2 positions) while the first decode step runs.
  ASSERT_TRUE(engine.Step(&outcome).ok());
  EXPECT_EQ(outcome.committed_sequences, 2);
  EXPECT_EQ(outcome.committed_tokens, 7);
  // The third commits a decoding step: one position per sequence.
  ASSERT_TRUE(engine.Step(&outcome).ok());
  EXPECT_EQ(outcome.committed_sequences, 2);
  EXPECT_EQ(outcome.committed_tokens, 2);
}

}  // namespace
}  // namespace gecd::engine
