#include "engine/engine.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine_test_util.h"
#include "gtest/gtest.h"

namespace gecd::engine {
namespace {

using testing::LoadFixtureModel;
using testing::LoadReference;

// Token id i reads "<i>", so a stop string can start inside one token and end in the next.
class AngleTokenizer : public model::Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view) const override {
    return absl::UnimplementedError("test tokenizer");
  }
  std::string Decode(std::span<const int32_t> ids, bool) const override {
    std::string s;
    for (int32_t id : ids) s += TokenBytes(id);
    return s;
  }
  std::string TokenBytes(int32_t id) const override { return absl::StrCat("<", id, ">"); }
  int32_t vocab_size() const override { return 256; }
  std::optional<int32_t> TokenToId(std::string_view) const override { return std::nullopt; }
  bool IsSpecial(int32_t) const override { return false; }
};

struct Output {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
};

// Steps until the engine is idle; checks that every sequence finishes exactly once.
std::map<SequenceId, Output> RunToCompletion(Engine& engine) {
  std::map<SequenceId, Output> out;
  for (int step = 0; engine.HasWork(); ++step) {
    auto events = engine.Step();
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok() || step > 10000) break;
    for (const StepEvent& e : *events) {
      Output& o = out[e.id];
      EXPECT_EQ(o.reason, FinishReason::kNone) << "event after sequence " << e.id << " finished";
      o.tokens.push_back(e.token);
      o.reason = e.reason;
      EXPECT_EQ(e.finished, e.reason != FinishReason::kNone);
    }
  }
  return out;
}

GenerationParams Greedy(int max_new_tokens) {
  GenerationParams p;
  p.max_new_tokens = max_new_tokens;
  return p;
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 64});
    ASSERT_NE(model_.backend, nullptr);
    cases_ = LoadReference("ref-llama-f32");
  }
  testing::LoadedModel model_;
  std::vector<testing::ReferenceCase> cases_;
};

TEST_F(EngineTest, BatchedGreedyEqualsHf) {
  Engine engine(model_.backend.get(), nullptr, {});
  for (size_t i = 0; i < cases_.size(); ++i) {
    ASSERT_TRUE(engine.AddSequence(i, cases_[i].prompt, Greedy(cases_[i].greedy.size())).ok());
  }
  const auto out = RunToCompletion(engine);
  for (size_t i = 0; i < cases_.size(); ++i) {
    EXPECT_EQ(out.at(i).tokens, cases_[i].greedy) << "case " << i;
    EXPECT_EQ(out.at(i).reason, FinishReason::kLength);
  }
  EXPECT_EQ(engine.num_free_blocks(), engine.num_blocks());
}

TEST_F(EngineTest, TinyStepBudgetChunksPrefillWithoutChangingOutput) {
  EngineOptions options;
  options.max_step_tokens = 5;
  Engine engine(model_.backend.get(), nullptr, options);
  for (size_t i = 0; i < cases_.size(); ++i) {
    ASSERT_TRUE(engine.AddSequence(i, cases_[i].prompt, Greedy(cases_[i].greedy.size())).ok());
  }
  const auto out = RunToCompletion(engine);
  for (size_t i = 0; i < cases_.size(); ++i) EXPECT_EQ(out.at(i).tokens, cases_[i].greedy);
}

TEST_F(EngineTest, StopsOnEosUnlessIgnored) {
  const auto& c = cases_.back();
  const int32_t eos = c.greedy[3];
  const size_t first = std::find(c.greedy.begin(), c.greedy.end(), eos) - c.greedy.begin();
  Engine engine(model_.backend.get(), nullptr, {.eos_token_ids = {eos}});
  ASSERT_TRUE(engine.AddSequence(1, c.prompt, Greedy(c.greedy.size())).ok());
  GenerationParams ignore = Greedy(c.greedy.size());
  ignore.ignore_eos = true;
  ASSERT_TRUE(engine.AddSequence(2, c.prompt, ignore).ok());
  const auto out = RunToCompletion(engine);
  EXPECT_EQ(out.at(1).tokens,
            std::vector<int32_t>(c.greedy.begin(), c.greedy.begin() + first + 1));
  EXPECT_EQ(out.at(1).reason, FinishReason::kStopToken);
  EXPECT_EQ(out.at(2).tokens, c.greedy);
  EXPECT_EQ(out.at(2).reason, FinishReason::kLength);
}

TEST_F(EngineTest, StopsOnStopTokenIdAndOnTokenLimit) {
  const auto& c = cases_[1];
  Engine engine(model_.backend.get(), nullptr, {});
  GenerationParams stop = Greedy(c.greedy.size());
  stop.stop_token_ids = {c.greedy[1]};
  ASSERT_TRUE(engine.AddSequence(1, c.prompt, stop).ok());
  ASSERT_TRUE(engine.AddSequence(2, c.prompt, Greedy(2)).ok());
  const auto out = RunToCompletion(engine);
  const size_t first = std::find(c.greedy.begin(), c.greedy.end(), c.greedy[1]) - c.greedy.begin();
  EXPECT_EQ(out.at(1).tokens.size(), first + 1);
  EXPECT_EQ(out.at(1).reason, FinishReason::kStopToken);
  EXPECT_EQ(out.at(2).tokens, std::vector<int32_t>(c.greedy.begin(), c.greedy.begin() + 2));
  EXPECT_EQ(out.at(2).reason, FinishReason::kLength);
}

TEST_F(EngineTest, StopsOnStopStringSpanningTokens) {
  const auto& c = cases_[2];
  AngleTokenizer tokenizer;
  // "<a><b><c><d>..." : "c><d" starts in token 2 and ends in token 3.
  const std::string stop = absl::StrCat(c.greedy[2], "><", c.greedy[3]);
  std::string text;
  size_t expected_tokens = 0;
  for (int32_t t : c.greedy) {
    text += tokenizer.TokenBytes(t);
    ++expected_tokens;
    if (text.find(stop) != std::string::npos) break;
  }
  Engine engine(model_.backend.get(), &tokenizer, {});
  GenerationParams params = Greedy(c.greedy.size());
  params.stop_strings = {"never appears", stop};
  ASSERT_TRUE(engine.AddSequence(7, c.prompt, params).ok());
  const auto out = RunToCompletion(engine);
  EXPECT_EQ(out.at(7).tokens,
            std::vector<int32_t>(c.greedy.begin(), c.greedy.begin() + expected_tokens));
  EXPECT_EQ(out.at(7).reason, FinishReason::kStopString);
}

TEST_F(EngineTest, FreeMidGenerationReturnsAllBlocks) {
  Engine engine(model_.backend.get(), nullptr, {});
  for (size_t i = 0; i < cases_.size(); ++i) {
    ASSERT_TRUE(engine.AddSequence(i, cases_[i].prompt, Greedy(40)).ok());
  }
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(engine.Step().ok());
  EXPECT_LT(engine.num_free_blocks(), engine.num_blocks());
  ASSERT_TRUE(engine.Free(3).ok());
  ASSERT_TRUE(engine.Step().ok());
  EXPECT_EQ(engine.Free(3).code(), absl::StatusCode::kNotFound);
  for (SequenceId id : {0, 1, 2}) ASSERT_TRUE(engine.Free(id).ok());
  EXPECT_FALSE(engine.HasWork());
  EXPECT_EQ(engine.num_free_blocks(), engine.num_blocks());
  // Freed between plan and commit: the step's result for it is dropped.
  ASSERT_TRUE(engine.AddSequence(9, cases_[0].prompt, Greedy(3)).ok());
  const StepPlan& plan = engine.PlanStep();
  StepResult result;
  ASSERT_TRUE(model_.backend->Forward(plan.batch, &result).ok());
  ASSERT_TRUE(engine.Free(9).ok());
  EXPECT_TRUE(engine.CommitStep(plan, result).empty());
  EXPECT_EQ(engine.num_free_blocks(), engine.num_blocks());
}

TEST_F(EngineTest, PreemptionUnderTinyCacheKeepsOutputs) {
  // Six sequences (the three shorter prompts twice) that all fit when admitted but not once
  // they grow by 12 tokens each.
  const int kNew = 12;
  auto add_all = [&](Engine& engine) {
    for (SequenceId id = 0; id < 6; ++id) {
      ASSERT_TRUE(engine.AddSequence(id, cases_[id % 3].prompt, Greedy(kNew)).ok());
    }
  };
  std::map<SequenceId, Output> expected;
  {
    Engine engine(model_.backend.get(), nullptr, {});
    add_all(engine);
    expected = RunToCompletion(engine);
    EXPECT_EQ(engine.num_preemptions(), 0);
  }
  // 10 blocks of 4 = 40 slots; the longest sequence alone needs 13 + 11 = 24.
  auto small = LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 10});
  ASSERT_NE(small.backend, nullptr);
  Engine engine(small.backend.get(), nullptr, {});
  add_all(engine);
  const auto out = RunToCompletion(engine);
  EXPECT_GT(engine.num_preemptions(), 0);
  for (SequenceId id = 0; id < 6; ++id) {
    EXPECT_EQ(out.at(id).tokens, expected.at(id).tokens) << "sequence " << id;
    EXPECT_EQ(out.at(id).reason, FinishReason::kLength);
  }
  EXPECT_EQ(engine.num_free_blocks(), engine.num_blocks());
}

TEST_F(EngineTest, RejectsBadSequences) {
  Engine engine(model_.backend.get(), nullptr, {});
  EXPECT_EQ(engine.AddSequence(1, {}, Greedy(4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.AddSequence(1, {3, 256}, Greedy(4)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.AddSequence(1, {3, -1}, Greedy(4)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.AddSequence(1, {3}, Greedy(0)).code(), absl::StatusCode::kInvalidArgument);
  // 64 blocks of 4 = 256 slots, also the model's max_position_embeddings.
  EXPECT_EQ(engine.AddSequence(1, std::vector<int32_t>(200, 3), Greedy(58)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(engine.AddSequence(1, std::vector<int32_t>(200, 3), Greedy(57)).ok());
  GenerationParams stop = Greedy(4);
  stop.stop_strings = {"x"};
  EXPECT_EQ(engine.AddSequence(2, {3}, stop).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.AddSequence(1, {3}, Greedy(4)).code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace gecd::engine
