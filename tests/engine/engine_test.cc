#include "engine/engine.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
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
  absl::StatusOr<std::vector<int32_t>> EncodePieces(
      std::span<const model::TextPiece>) const override {
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
  int first_step = -1;  // the steps that produced its first and last tokens
  int last_step = -1;
};

void Record(const std::vector<StepEvent>& events, int step, std::map<SequenceId, Output>& out) {
  for (const StepEvent& e : events) {
    Output& o = out[e.id];
    EXPECT_EQ(o.reason, FinishReason::kNone) << "event after sequence " << e.id << " finished";
    o.tokens.push_back(e.token);
    o.reason = e.reason;
    if (o.first_step < 0) o.first_step = step;
    o.last_step = step;
    EXPECT_EQ(e.finished, e.reason != FinishReason::kNone);
  }
}

// Steps until the engine is idle; checks that every sequence finishes exactly once.
std::map<SequenceId, Output> RunToCompletion(Engine& engine) {
  std::map<SequenceId, Output> out;
  for (int step = 0; engine.HasWork(); ++step) {
    auto events = engine.Step();
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok() || step > 10000) break;
    Record(*events, step, out);
  }
  return out;
}

// A started sequence is never paused: once it has its first token, it gets one every step.
void ExpectNeverPaused(const std::map<SequenceId, Output>& out) {
  for (const auto& [id, o] : out) {
    EXPECT_EQ(o.last_step - o.first_step + 1, static_cast<int>(o.tokens.size()))
        << "sequence " << id << " skipped steps between its first and last token";
  }
}

// Drives the engine as the engine process does: step N+1 is planned and dispatched before
// step N is committed. `between(step)` runs after each dispatch, while a step is in flight.
std::map<SequenceId, Output> RunPipelined(Engine& engine, Backend& backend,
                                          const std::function<void(int)>& between = nullptr) {
  std::map<SequenceId, Output> out;
  StepResult results[2];
  const StepPlan* in_flight = nullptr;
  int slot = 0;
  for (int step = 0; engine.HasWork() || in_flight != nullptr; ++step) {
    if (step > 10000) {
      ADD_FAILURE() << "no progress";
      break;
    }
    const StepPlan& next = engine.PlanStep();
    const StepPlan* dispatched = nullptr;
    if (!next.empty()) {
      const absl::Status status = backend.Forward(next.batch, &results[slot ^ 1]);
      EXPECT_TRUE(status.ok()) << status;
      if (!status.ok()) break;
      dispatched = &next;
    }
    if (between) between(step);
    if (in_flight != nullptr) Record(engine.CommitStep(*in_flight, results[slot]), step, out);
    in_flight = dispatched;
    slot ^= 1;
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
  EXPECT_EQ(out.at(1).tokens, std::vector<int32_t>(c.greedy.begin(), c.greedy.begin() + first + 1));
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

TEST_F(EngineTest, TinyCacheStartsOnlyWhatItCanFinishAndKeepsOutputs) {
  // Six sequences (the three shorter prompts twice) that all fit when started but not once
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
  }
  // 10 blocks of 4 = 40 slots; the longest sequence alone needs 13 + 11 = 24.
  auto small = LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 10});
  ASSERT_NE(small.backend, nullptr);
  for (bool pipelined : {false, true}) {
    Engine engine(small.backend.get(), nullptr, {});
    add_all(engine);
    // The first step starts only the sequences the pool can hold at their longest.
    int waited = 0;
    const auto out = pipelined ? RunPipelined(engine, *small.backend,
                                              [&](int) { waited += engine.num_waiting(); })
                               : RunToCompletion(engine);
    ExpectNeverPaused(out);
    if (pipelined) EXPECT_GT(waited, 0);
    for (SequenceId id = 0; id < 6; ++id) {
      EXPECT_EQ(out.at(id).tokens, expected.at(id).tokens) << "sequence " << id;
      EXPECT_EQ(out.at(id).reason, FinishReason::kLength);
    }
    // Not all ran side by side: some started after others finished.
    int latest_start = 0, earliest_end = 1 << 30;
    for (const auto& [id, o] : out) {
      latest_start = std::max(latest_start, o.first_step);
      earliest_end = std::min(earliest_end, o.last_step);
    }
    EXPECT_GT(latest_start, earliest_end);
    EXPECT_EQ(engine.num_free_blocks(), engine.num_blocks());
  }
}

// A fake clock for due times and deadlines.
struct FakeClock {
  int64_t now = 1000;
  std::function<int64_t()> Fn() {
    return [this] { return now; };
  }
};

TEST_F(EngineTest, WaitingSequencesStartEarliestDueFirst) {
  FakeClock clock;
  Engine engine(model_.backend.get(), nullptr, {.max_batch_size = 1, .clock = clock.Fn()});
  // Added in this order; due 0 is the time of adding (1000), after every earlier due time.
  const std::vector<std::pair<SequenceId, int64_t>> added = {
      {1, 300}, {2, 0}, {3, 100}, {4, 200}, {5, 100}};
  for (const auto& [id, due] : added) {
    GenerationParams params = Greedy(3);
    params.due_us = due;
    ASSERT_TRUE(engine.AddSequence(id, cases_[0].prompt, params).ok());
  }
  const auto out = RunToCompletion(engine);
  ExpectNeverPaused(out);
  std::vector<SequenceId> order;
  for (const auto& [id, o] : out) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](SequenceId a, SequenceId b) {
    return out.at(a).first_step < out.at(b).first_step;
  });
  // Ties (3 and 5, both due at 100) keep their arrival order.
  EXPECT_EQ(order, (std::vector<SequenceId>{3, 5, 4, 1, 2}));
}

TEST_F(EngineTest, NobodyOvertakesTheHeadWaitingForRoom) {
  // 10 blocks of 4. Running: a prompt of 10 to 29 tokens + 11 generated positions (6 to 10
  // blocks). The head needs as many more, which the pool cannot promise until the first
  // finishes; the short one behind it (1 block) could start at once, but waits its turn.
  auto small = LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 10});
  ASSERT_NE(small.backend, nullptr);
  FakeClock clock;
  Engine engine(small.backend.get(), nullptr, {.clock = clock.Fn()});
  const auto longest = std::find_if(cases_.begin(), cases_.end(), [](const auto& c) {
    return c.prompt.size() >= 10 && c.prompt.size() <= 29;
  });
  ASSERT_NE(longest, cases_.end());
  auto add = [&](SequenceId id, std::vector<int32_t> prompt, int new_tokens, int64_t due) {
    GenerationParams params = Greedy(new_tokens);
    params.due_us = due;
    ASSERT_TRUE(engine.AddSequence(id, std::move(prompt), params).ok());
  };
  add(1, longest->prompt, 12, 1);
  add(2, longest->prompt, 12, 2);
  add(3, {longest->prompt[0]}, 4, 3);
  const auto out = RunToCompletion(engine);
  ExpectNeverPaused(out);
  EXPECT_GT(out.at(2).first_step, out.at(1).last_step);
  EXPECT_GE(out.at(3).first_step, out.at(2).first_step);
}

TEST_F(EngineTest, SequencesPastTheirDeadlineAreDroppedBeforeTheyStart) {
  FakeClock clock;
  Engine engine(model_.backend.get(), nullptr, {.max_batch_size = 1, .clock = clock.Fn()});
  GenerationParams running = Greedy(6);
  running.deadline_us = 1500;  // passes while it runs: it is not stopped
  GenerationParams late = Greedy(6);
  late.deadline_us = 1500;               // passes while it waits: dropped
  GenerationParams patient = Greedy(6);  // no deadline
  ASSERT_TRUE(engine.AddSequence(1, cases_[0].prompt, running).ok());
  ASSERT_TRUE(engine.AddSequence(2, cases_[1].prompt, late).ok());
  ASSERT_TRUE(engine.AddSequence(3, cases_[2].prompt, patient).ok());
  std::map<SequenceId, Output> out;
  ASSERT_TRUE(engine.Step().ok());
  EXPECT_TRUE(engine.TakeExpired().empty());
  clock.now = 1500;
  std::vector<SequenceId> expired;
  for (int step = 1; engine.HasWork() && step < 100; ++step) {
    auto events = engine.Step();
    ASSERT_TRUE(events.ok());
    Record(*events, step, out);
    for (SequenceId id : engine.TakeExpired()) expired.push_back(id);
  }
  EXPECT_EQ(expired, std::vector<SequenceId>{2});
  EXPECT_FALSE(out.contains(2));
  EXPECT_EQ(engine.Free(2).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(out.at(1).reason, FinishReason::kLength);
  EXPECT_EQ(out.at(3).reason, FinishReason::kLength);
  EXPECT_EQ(engine.num_free_blocks(), engine.num_blocks());
}

// Random workloads: prompt lengths, token limits, EOS, stop token ids and stop strings, a tiny
// cache that makes sequences wait for room, and sequences freed while a step is in flight. The
// pipelined driver must produce exactly the output of Step().
struct Workload {
  struct Request {
    std::vector<int32_t> prompt;
    GenerationParams params;
  };
  std::vector<Request> requests;
  std::vector<int32_t> eos;
  std::map<int, std::vector<SequenceId>> frees;  // by step
};

Workload RandomWorkload(std::mt19937& rng, int max_positions) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Workload w;
  const int n = uniform(1, 10);
  for (int i = 0; i < n; ++i) {
    Workload::Request r;
    const int prompt = uniform(1, max_positions / 2);
    for (int t = 0; t < prompt; ++t) r.prompt.push_back(uniform(0, 255));
    r.params.max_new_tokens = uniform(1, max_positions - prompt + 1);
    if (uniform(0, 3) == 0) r.params.stop_token_ids = {uniform(0, 255)};
    if (uniform(0, 3) == 0) r.params.stop_strings = {absl::StrCat(uniform(0, 25))};
    r.params.ignore_eos = uniform(0, 4) == 0;
    w.requests.push_back(std::move(r));
  }
  for (int i = uniform(0, 3); i > 0; --i) w.eos.push_back(uniform(0, 255));
  for (int i = uniform(0, 2); i > 0; --i) w.frees[uniform(0, 12)].push_back(uniform(0, n - 1));
  return w;
}

// `options` with the workload's EOS ids; `stats` (may be null) gets the engine's speculation
// counters at the end.
std::map<SequenceId, Output> RunWorkload(const Workload& w, Backend& backend,
                                         const model::Tokenizer& tokenizer, bool pipelined,
                                         int64_t* waited, EngineOptions options = {},
                                         SpeculationStats* stats = nullptr) {
  options.eos_token_ids = w.eos;
  Engine engine(&backend, &tokenizer, std::move(options));
  for (size_t i = 0; i < w.requests.size(); ++i) {
    EXPECT_TRUE(engine.AddSequence(i, w.requests[i].prompt, w.requests[i].params).ok());
  }
  *waited = 0;
  auto free = [&](int step) {
    *waited += engine.num_waiting();
    auto it = w.frees.find(step);
    if (it == w.frees.end()) return;
    for (SequenceId id : it->second) engine.Free(id).IgnoreError();  // may have finished
  };
  std::map<SequenceId, Output> out;
  if (pipelined) {
    out = RunPipelined(engine, backend, free);
  } else {
    for (int step = 0; engine.HasWork() && step < 10000; ++step) {
      auto events = engine.Step();
      EXPECT_TRUE(events.ok()) << events.status();
      if (!events.ok()) break;
      Record(*events, step, out);
      free(step);
    }
  }
  EXPECT_FALSE(engine.HasWork());
  EXPECT_EQ(engine.num_retired(), 0);
  EXPECT_EQ(engine.num_free_blocks(), engine.num_blocks());
  if (stats != nullptr) *stats = engine.speculation();
  return out;
}

void ExpectPipelinedEqualsSynchronous(const std::string& model, int seed_base) {
  AngleTokenizer tokenizer;
  // 12 blocks of 4 = 48 slots: a few sequences fit, more wait for room.
  auto small = LoadFixtureModel(model, {.kv_block_size = 4, .num_kv_blocks = 12});
  ASSERT_NE(small.backend, nullptr);
  int64_t pipelined_waited = 0;
  for (int seed = seed_base; seed < seed_base + 40; ++seed) {
    std::mt19937 rng(seed);
    const Workload w = RandomWorkload(rng, 40);
    int64_t waited = 0;
    const auto expected = RunWorkload(w, *small.backend, tokenizer, false, &waited);
    const auto out = RunWorkload(w, *small.backend, tokenizer, true, &waited);
    pipelined_waited += waited;
    ExpectNeverPaused(expected);
    ExpectNeverPaused(out);
    Workload no_frees = w;
    no_frees.frees.clear();
    const auto unfreed = RunWorkload(no_frees, *small.backend, tokenizer, false, &waited);
    for (SequenceId id = 0; id < w.requests.size(); ++id) {
      const auto e = expected.find(id);
      const auto o = out.find(id);
      const bool freed = std::any_of(w.frees.begin(), w.frees.end(), [&](const auto& f) {
        return std::find(f.second.begin(), f.second.end(), id) != f.second.end();
      });
      if (freed) {
        // Freed at a step boundary that differs between the drivers: a prefix of the output
        // the sequence has when it is not freed.
        const std::vector<int32_t>& all = unfreed.at(id).tokens;
        for (const auto* run : {&expected, &out}) {
          const auto r = run->find(id);
          if (r == run->end()) continue;
          ASSERT_LE(r->second.tokens.size(), all.size()) << "seed " << seed << " sequence " << id;
          EXPECT_TRUE(std::equal(r->second.tokens.begin(), r->second.tokens.end(), all.begin()))
              << "seed " << seed << " sequence " << id;
        }
        continue;
      }
      ASSERT_NE(e, expected.end()) << "seed " << seed << " sequence " << id;
      ASSERT_NE(o, out.end()) << "seed " << seed << " sequence " << id;
      EXPECT_EQ(o->second.tokens, e->second.tokens) << "seed " << seed << " sequence " << id;
      EXPECT_EQ(o->second.reason, e->second.reason) << "seed " << seed << " sequence " << id;
      EXPECT_NE(o->second.reason, FinishReason::kNone);
    }
  }
  EXPECT_GT(pipelined_waited, 0);
}

TEST_F(EngineTest, PipelinedEqualsSynchronousOnRandomWorkloads) {
  ExpectPipelinedEqualsSynchronous("ref-llama-f32", 1);
}

TEST_F(EngineTest, PipelinedEqualsSynchronousOnQwen2) {
  ExpectPipelinedEqualsSynchronous("ref-qwen2-f32", 1000);
}

TEST_F(EngineTest, PipelinedFreeOfAnInFlightSequenceWaitsForItsCommit) {
  Engine engine(model_.backend.get(), nullptr, {});
  ASSERT_TRUE(engine.AddSequence(1, cases_[0].prompt, Greedy(8)).ok());
  StepResult first;
  StepResult second;
  const StepPlan& plan1 = engine.PlanStep();
  ASSERT_TRUE(model_.backend->Forward(plan1.batch, &first).ok());
  std::vector<StepEvent> events = engine.CommitStep(plan1, first);
  ASSERT_EQ(events.size(), 1u);
  // Step 2 in flight, step 3 planned from its pending token.
  const StepPlan& plan2 = engine.PlanStep();
  ASSERT_TRUE(model_.backend->Forward(plan2.batch, &second).ok());
  const StepPlan& plan3 = engine.PlanStep();
  ASSERT_EQ(plan3.batch.sequences.size(), 1u);
  EXPECT_EQ(plan3.batch.sequences[0].previous_sample, 0);
  ASSERT_TRUE(model_.backend->Forward(plan3.batch, &first).ok());
  // Freed with two steps in flight: the id is gone at once, the blocks only after both commits.
  ASSERT_TRUE(engine.Free(1).ok());
  EXPECT_EQ(engine.Free(1).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(engine.HasWork());
  EXPECT_LT(engine.num_free_blocks(), engine.num_blocks());
  ASSERT_TRUE(engine.AddSequence(1, cases_[1].prompt, Greedy(2)).ok());  // the id is reusable
  EXPECT_TRUE(engine.CommitStep(plan2, second).empty());
  EXPECT_EQ(engine.num_retired(), 1);
  EXPECT_TRUE(engine.CommitStep(plan3, first).empty());
  EXPECT_EQ(engine.num_retired(), 0);
  const auto out = RunToCompletion(engine);
  EXPECT_EQ(out.at(1).tokens,
            std::vector<int32_t>(cases_[1].greedy.begin(), cases_[1].greedy.begin() + 2));
  EXPECT_EQ(engine.num_free_blocks(), engine.num_blocks());
}

// Greedy decoding with the copy bias as its header defines it, written out here rather than
// through engine/copy_bias.cc, over one backend call per step that recomputes the whole
// sequence. Counts the steps where the bias changed the choice and where an aligned candidate
// still lost, so a test can tell that both happened.
struct CopyDecode {
  std::vector<int32_t> tokens;
  int flipped = 0;
  int overruled = 0;
};

CopyDecode ReferenceCopyDecode(Backend& backend, const std::vector<int32_t>& prompt, int begin,
                               int end, float bias, int32_t eos, int max_new) {
  const std::vector<int32_t> text(prompt.begin() + begin, prompt.begin() + end);
  std::vector<int32_t> sequence = prompt;
  CopyDecode out;
  int cursor = 0;
  bool aligned = true;
  for (int step = 0; step < max_new; ++step) {
    testing::BackendDriver driver(&backend);
    driver.Add(sequence);
    const std::vector<float> logits = driver.RunAll(64).at(0);
    const int n = static_cast<int>(text.size());
    const int32_t candidate = !aligned ? -1 : cursor < n ? text[cursor] : eos;
    int32_t choice = testing::Argmax(logits);
    if (candidate >= 0) {
      const float boosted = logits[candidate] + bias;
      if (boosted > logits[choice] || (boosted == logits[choice] && candidate < choice)) {
        out.flipped += candidate != choice ? 1 : 0;
        choice = candidate;
      } else {
        ++out.overruled;
      }
    }
    out.tokens.push_back(choice);
    if (choice == eos) break;
    sequence.push_back(choice);
    int best = -1;
    for (int j = 0; j < n; ++j) {
      if (text[j] != choice) continue;
      if (best < 0 || std::abs(j - cursor) < std::abs(best - cursor)) best = j;
    }
    aligned = best >= 0;
    if (aligned) cursor = best + 1;
  }
  return out;
}

TEST_F(EngineTest, CopyBiasDecodesAsItsRuleSaysSynchronousAndPipelined) {
  constexpr int32_t kEos = 1;
  constexpr float kBias = 3.0f;  // enough to win some steps of this random model, not all
  std::mt19937 rng(7);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  struct Request {
    std::vector<int32_t> prompt;
    GenerationParams params;
  };
  std::vector<Request> requests;
  int flipped = 0;
  int overruled = 0;
  std::vector<CopyDecode> expected;
  for (int i = 0; i < 8; ++i) {
    Request r;
    // A small alphabet, so texts repeat tokens and outputs reuse them elsewhere.
    for (int t = uniform(6, 20); t > 0; --t) r.prompt.push_back(uniform(2, 24));
    r.params = Greedy(uniform(4, 24));
    r.params.copy_bias = kBias;
    r.params.copy_begin = uniform(0, 2);
    r.params.copy_end = static_cast<int>(r.prompt.size()) - uniform(0, 2);
    expected.push_back(ReferenceCopyDecode(*model_.backend, r.prompt, r.params.copy_begin,
                                           r.params.copy_end, kBias, kEos,
                                           r.params.max_new_tokens));
    flipped += expected.back().flipped;
    overruled += expected.back().overruled;
    requests.push_back(std::move(r));
  }
  // Not vacuous: the bias both won and lost somewhere.
  EXPECT_GT(flipped, 0);
  EXPECT_GT(overruled, 0);
  for (bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "pipelined" : "synchronous");
    Engine engine(model_.backend.get(), nullptr, {.eos_token_ids = {kEos}});
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_TRUE(engine.AddSequence(i, requests[i].prompt, requests[i].params).ok());
    }
    const auto out = pipelined ? RunPipelined(engine, *model_.backend) : RunToCompletion(engine);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(out.at(i).tokens, expected[i].tokens) << "sequence " << i;
    }
  }
}

TEST_F(EngineTest, OverwhelmingCopyBiasCopiesTheTextWithSequencesWaitingForRoom) {
  constexpr int32_t kEos = 1;
  // 10 blocks of 4 = 40 slots for 6 sequences of up to 24 positions: some start only when
  // others have finished, with cursors of their own.
  auto small = LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 10});
  ASSERT_NE(small.backend, nullptr);
  std::mt19937 rng(11);
  for (bool pipelined : {false, true}) {
    Engine engine(small.backend.get(), nullptr, {.eos_token_ids = {kEos}});
    std::vector<std::vector<int32_t>> texts;
    for (SequenceId id = 0; id < 6; ++id) {
      std::vector<int32_t> prompt = {0};
      for (int t = 0; t < 10; ++t) prompt.push_back(std::uniform_int_distribution<int>(2, 9)(rng));
      prompt.push_back(0);
      GenerationParams params = Greedy(12);
      params.copy_bias = 1e4f;
      params.copy_begin = 1;
      params.copy_end = 11;
      texts.emplace_back(prompt.begin() + 1, prompt.begin() + 11);
      ASSERT_TRUE(engine.AddSequence(id, std::move(prompt), params).ok());
    }
    const auto out = pipelined ? RunPipelined(engine, *small.backend) : RunToCompletion(engine);
    ExpectNeverPaused(out);
    for (SequenceId id = 0; id < 6; ++id) {
      std::vector<int32_t> copy = texts[id];
      copy.push_back(kEos);
      EXPECT_EQ(out.at(id).tokens, copy) << "sequence " << id << (pipelined ? " pipelined" : "");
      EXPECT_EQ(out.at(id).reason, FinishReason::kStopToken);
    }
  }
}

// Speculative decoding: random requests over texts from a small alphabet (so copies and edits
// both happen), with and without the copy bias (an overwhelming one makes whole drafts pass),
// EOS, stop ids and strings, token limits, a cache that makes sequences wait, texts of one
// repeated token and of one token, and sequences freed mid-run. The output must be token for
// token that of decoding without drafts, synchronous and pipelined.
struct SpeculativeCase {
  Workload workload;
  int speculate = 0;
  int max_step_tokens = 0;
};

SpeculativeCase RandomSpeculativeCase(std::mt19937& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  SpeculativeCase c;
  Workload& w = c.workload;
  const int n = uniform(1, 8);
  for (int i = 0; i < n; ++i) {
    Workload::Request r;
    const int kind = uniform(0, 5);
    const int length = kind == 0 ? 1 : uniform(2, 18);
    r.prompt.push_back(0);
    const int repeated = uniform(2, 12);
    for (int t = 0; t < length; ++t) r.prompt.push_back(kind == 1 ? repeated : uniform(2, 12));
    r.prompt.push_back(0);
    r.params.copy_begin = 1;
    r.params.copy_end = length + 1;
    const int bias = uniform(0, 2);
    r.params.copy_bias = bias == 0 ? 0.0f : bias == 1 ? 3.0f : 1e4f;
    r.params.max_new_tokens = uniform(1, 24);
    if (uniform(0, 4) == 0) r.params.stop_token_ids = {uniform(2, 12)};
    if (uniform(0, 4) == 0) r.params.stop_strings = {absl::StrCat("<", uniform(2, 12), ">")};
    r.params.ignore_eos = uniform(0, 5) == 0;
    w.requests.push_back(std::move(r));
  }
  w.eos = {1};
  for (int i = uniform(0, 2); i > 0; --i) w.frees[uniform(0, 8)].push_back(uniform(0, n - 1));
  c.speculate = uniform(1, 12);
  c.max_step_tokens = uniform(0, 2) == 0 ? uniform(8, 24) : 0;
  return c;
}

EngineOptions SpeculativeOptions(const SpeculativeCase& c, bool speculate) {
  return {.max_step_tokens = c.max_step_tokens, .speculate_tokens = speculate ? c.speculate : 0};
}

TEST_F(EngineTest, SpeculativeDecodingEqualsGreedyOnRandomWorkloads) {
  AngleTokenizer tokenizer;
  // 14 blocks of 4 = 56 slots: a few sequences fit, more wait for room.
  auto small = LoadFixtureModel("ref-llama-f32", {.kv_block_size = 4, .num_kv_blocks = 14});
  ASSERT_NE(small.backend, nullptr);
  SpeculationStats total;
  int64_t steps_without = 0;
  for (int seed = 0; seed < 60; ++seed) {
    std::mt19937 rng(seed);
    SpeculativeCase c = RandomSpeculativeCase(rng);
    SpeculationStats plain_stats;
    SpeculationStats stats;
    SpeculativeCase unfreed_case = c;
    unfreed_case.workload.frees.clear();
    int64_t waited = 0;
    const auto unfreed = RunWorkload(unfreed_case.workload, *small.backend, tokenizer, false,
                                     &waited, SpeculativeOptions(c, false), &plain_stats);
    EXPECT_EQ(plain_stats.accepted + plain_stats.rejected, 0);
    steps_without += plain_stats.sequence_steps;
    for (bool pipelined : {false, true}) {
      const auto out = RunWorkload(c.workload, *small.backend, tokenizer, pipelined, &waited,
                                   SpeculativeOptions(c, true), &stats);
      if (!pipelined && c.workload.frees.empty()) {
        total.accepted += stats.accepted;
        total.rejected += stats.rejected;
        total.sequence_steps += stats.sequence_steps;
      }
      for (SequenceId id = 0; id < c.workload.requests.size(); ++id) {
        const std::vector<int32_t>& all = unfreed.at(id).tokens;
        const auto o = out.find(id);
        if (o == out.end()) continue;  // freed before its first token
        const bool freed = o->second.reason == FinishReason::kNone;
        // Freed sequences stop at a step boundary of their own: a prefix of the whole output.
        if (freed) {
          ASSERT_LE(o->second.tokens.size(), all.size()) << "seed " << seed << " seq " << id;
          EXPECT_TRUE(std::equal(o->second.tokens.begin(), o->second.tokens.end(), all.begin()))
              << "seed " << seed << " sequence " << id << (pipelined ? " pipelined" : "");
          continue;
        }
        EXPECT_EQ(o->second.tokens, all)
            << "seed " << seed << " sequence " << id << (pipelined ? " pipelined" : "");
        EXPECT_EQ(o->second.reason, unfreed.at(id).reason) << "seed " << seed << " seq " << id;
      }
    }
  }
  // Not vacuous: drafts were both accepted and rejected, and saved steps.
  EXPECT_GT(total.accepted, 0);
  EXPECT_GT(total.rejected, 0);
  EXPECT_LT(total.sequence_steps, steps_without);
}

// A text the output copies whole (an overwhelming copy bias): the prefill carries the whole
// text and EOS as drafts, so the sequence finishes in one step, EOS accepted inside the draft.
TEST_F(EngineTest, SpeculativeCopyFinishesOnEosInsideTheDraft) {
  constexpr int32_t kEos = 1;
  std::vector<int32_t> prompt = {0, 5, 9, 3, 7, 7, 4, 11, 6, 2, 0};
  GenerationParams params = Greedy(20);
  params.copy_bias = 1e4f;
  params.copy_begin = 1;
  params.copy_end = 10;
  Engine engine(model_.backend.get(), nullptr, {.eos_token_ids = {kEos}, .speculate_tokens = 16});
  ASSERT_TRUE(engine.AddSequence(1, prompt, params).ok());
  const auto out = RunToCompletion(engine);
  std::vector<int32_t> copy(prompt.begin() + 1, prompt.begin() + 10);
  copy.push_back(kEos);
  EXPECT_EQ(out.at(1).tokens, copy);
  EXPECT_EQ(out.at(1).reason, FinishReason::kStopToken);
  EXPECT_EQ(engine.speculation().sequence_steps, 1);
  EXPECT_EQ(engine.speculation().accepted, 10);
  EXPECT_EQ(engine.speculation().rejected, 0);
  EXPECT_EQ(out.at(1).last_step, 0);
}

// max_new_tokens reached inside a draft: the output stops there with kLength, and the draft
// never runs past the positions the sequence reserved.
TEST_F(EngineTest, SpeculativeStopsAtTheTokenLimitInsideADraft) {
  std::vector<int32_t> prompt = {0, 5, 9, 3, 7, 8, 4, 11, 6, 2, 0};
  for (int limit : {1, 2, 3, 6}) {
    GenerationParams params = Greedy(limit);
    params.copy_bias = 1e4f;
    params.copy_begin = 1;
    params.copy_end = 10;
    Engine engine(model_.backend.get(), nullptr, {.eos_token_ids = {1}, .speculate_tokens = 16});
    ASSERT_TRUE(engine.AddSequence(1, prompt, params).ok());
    const auto out = RunToCompletion(engine);
    EXPECT_EQ(out.at(1).tokens,
              std::vector<int32_t>(prompt.begin() + 1, prompt.begin() + 1 + limit))
        << "limit " << limit;
    EXPECT_EQ(out.at(1).reason, FinishReason::kLength);
    // The prefill drafts up to the limit (none for a limit of 1).
    EXPECT_EQ(engine.speculation().sequence_steps, 1) << "limit " << limit;
    EXPECT_EQ(engine.speculation().accepted, limit - 1) << "limit " << limit;
    EXPECT_EQ(engine.num_free_blocks(), engine.num_blocks());
  }
}

// A rejected draft rolls the sequence back: the next step starts right after the accepted
// tokens, rewriting the rejected positions, and the output is the plain greedy one.
TEST_F(EngineTest, SpeculativeRejectionRollsTheCacheBack) {
  std::mt19937 rng(5);
  int verified = 0;
  int64_t rejected = 0;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt = {0};
    for (int t = 0; t < 14; ++t) prompt.push_back(std::uniform_int_distribution<int>(2, 8)(rng));
    prompt.push_back(0);
    const int n = static_cast<int>(prompt.size());
    GenerationParams params = Greedy(20);
    params.copy_bias = 3.0f;  // wins some steps of this random model, not all: edits happen
    params.copy_begin = 1;
    params.copy_end = n - 1;
    Engine plain(model_.backend.get(), nullptr, {.eos_token_ids = {1}});
    ASSERT_TRUE(plain.AddSequence(1, prompt, params).ok());
    const std::vector<int32_t> expected = RunToCompletion(plain).at(1).tokens;
    Engine engine(model_.backend.get(), nullptr, {.eos_token_ids = {1}, .speculate_tokens = 4});
    ASSERT_TRUE(engine.AddSequence(1, prompt, params).ok());
    std::vector<int32_t> tokens;
    for (int step = 0; engine.HasWork() && step < 100; ++step) {
      const StepPlan& plan = engine.PlanStep();
      ASSERT_EQ(plan.batch.sequences.size(), 1u);
      const BatchSequence& entry = plan.batch.sequences[0];
      // Every step starts where the committed output ends, whatever the last one drafted.
      if (step > 0) EXPECT_EQ(entry.start_position, n + static_cast<int>(tokens.size()) - 1);
      verified += entry.num_drafts > 0 ? 1 : 0;
      StepResult result;
      ASSERT_TRUE(model_.backend->Forward(plan.batch, &result).ok());
      for (const StepEvent& e : engine.CommitStep(plan, result)) tokens.push_back(e.token);
    }
    EXPECT_EQ(tokens, expected) << "prompt " << i;
    rejected += engine.speculation().rejected;
  }
  EXPECT_GT(verified, 0);
  EXPECT_GT(rejected, 0);
}

// Freed while its verify is in flight: the commit skips it and its blocks come back.
TEST_F(EngineTest, SpeculativeSequenceCancelledMidVerify) {
  std::vector<int32_t> prompt = {0, 5, 9, 3, 7, 8, 4, 11, 6, 2, 0};
  GenerationParams params = Greedy(20);
  params.copy_bias = 1e4f;
  params.copy_begin = 1;
  params.copy_end = 10;
  Engine engine(model_.backend.get(), nullptr, {.eos_token_ids = {1}, .speculate_tokens = 8});
  ASSERT_TRUE(engine.AddSequence(1, prompt, params).ok());
  ASSERT_TRUE(engine.AddSequence(2, prompt, params).ok());
  const StepPlan& plan = engine.PlanStep();
  ASSERT_EQ(plan.batch.sequences.size(), 2u);
  EXPECT_EQ(plan.batch.sequences[0].num_drafts, 8);
  StepResult result;
  ASSERT_TRUE(model_.backend->Forward(plan.batch, &result).ok());
  // Not planned again while its verify is in flight.
  EXPECT_TRUE(engine.PlanStep().empty());
  ASSERT_TRUE(engine.Free(1).ok());
  const std::vector<StepEvent> events = engine.CommitStep(plan, result);
  ASSERT_EQ(events.size(), 9u);  // sequence 2 only: 8 drafts and the choice after them
  for (const StepEvent& e : events) EXPECT_EQ(e.id, 2u);
  EXPECT_EQ(engine.num_retired(), 0);
  RunToCompletion(engine);
  EXPECT_EQ(engine.num_free_blocks(), engine.num_blocks());
}

TEST_F(EngineTest, RejectsBadSequences) {
  Engine engine(model_.backend.get(), nullptr, {});
  EXPECT_EQ(engine.AddSequence(1, {}, Greedy(4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.AddSequence(1, {3, 256}, Greedy(4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.AddSequence(1, {3, -1}, Greedy(4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.AddSequence(1, {3}, Greedy(0)).code(), absl::StatusCode::kInvalidArgument);
  // 64 blocks of 4 = 256 slots, also the model's max_position_embeddings.
  EXPECT_EQ(engine.AddSequence(1, std::vector<int32_t>(200, 3), Greedy(58)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(engine.AddSequence(1, std::vector<int32_t>(200, 3), Greedy(57)).ok());
  GenerationParams stop = Greedy(4);
  stop.stop_strings = {"x"};
  EXPECT_EQ(engine.AddSequence(2, {3}, stop).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.AddSequence(1, {3}, Greedy(4)).code(), absl::StatusCode::kAlreadyExists);
  for (auto [bias, begin, end] :
       {std::tuple{-1.0f, 0, 1}, std::tuple{NAN, 0, 1}, std::tuple{1.0f, 1, 0},
        std::tuple{1.0f, 0, 3}, std::tuple{1.0f, -1, 1}}) {
    GenerationParams copy = Greedy(4);
    copy.copy_bias = bias;
    copy.copy_begin = begin;
    copy.copy_end = end;
    EXPECT_EQ(engine.AddSequence(3, {3, 4}, copy).code(), absl::StatusCode::kInvalidArgument)
        << bias << " [" << begin << ", " << end << ")";
  }
}

}  // namespace
}  // namespace gecd::engine
