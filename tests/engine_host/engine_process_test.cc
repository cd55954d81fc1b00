#include "engine_host/engine_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/memory_limit.h"
#include "common/monotonic_clock.h"
#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "engine_host/generator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ipc/shared_segment.h"
#include "metrics/metrics.h"
#include "model/checkpoint.h"
#include "supervisor/roles.h"
#include "testing/random_model.h"
#include "testing/test_paths.h"
#include "worker/ring_engine_link.h"

namespace gecd::engine_host {
namespace {

using metrics::FormatPrometheus;
using metrics::MetricsRegion;
using metrics::MetricsSnapshot;
using std::chrono::seconds;
using ::testing::HasSubstr;
using worker::EngineReply;
using worker::EngineRequest;
using worker::RingEngineLink;

// Generous: these run beside other suites on a loaded 2-core machine.
constexpr auto kTimeout = seconds(60);
// New tokens for a request that must still be running when the test interrupts it (seconds of
// engine time for the test model).
constexpr int kLong = 4000;

template <typename Predicate>
bool WaitUntil(Predicate predicate, std::chrono::nanoseconds timeout = kTimeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A random Llama with a 2,000-token vocabulary, written once for the suite. Prompts are token
// ids: the engine process never tokenizes (workers do).
std::string ModelDir() {
  static const std::string dir = [] {
    const std::string d = gecd::testing::MakeTempDir();
    gecd::testing::RandomModelOptions options;
    options.vocab_size = 2000;
    options.max_position_embeddings = 4096;  // room for generations long enough to interrupt
    options.seed = 7;
    EXPECT_TRUE(gecd::testing::WriteRandomModel(d, options).ok());
    return d;
  }();
  return dir;
}

config::Config EngineConfig(const std::string& backend) {
  config::Config c;
  c.engine.backend = backend;
  c.model.dir = ModelDir();
  c.engine.threads = 1;
  c.engine.kv_cache_mb = 8;
  c.engine.max_batch_size = 32;
  c.engine.max_step_tokens = 512;
  return c;
}

// A generator without a model: each live sequence asks for max_new_tokens tokens, which
// GiveTokens hands out one a step. Its subclasses decide when a step gives and how long it
// takes. The engine loop's thread only.
class TokenCountingGenerator : public Generator {
 public:
  absl::Status Add(engine::SequenceId id, std::vector<int32_t>,
                   engine::GenerationParams params) override {
    left_[id] = params.max_new_tokens;
    return absl::OkStatus();
  }
  bool Free(engine::SequenceId id) override { return left_.erase(id) > 0; }
  bool HasWork() const override { return !left_.empty(); }
  void PublishGauges(metrics::ProcessMetrics&) override {}

 protected:
  size_t live() const { return left_.size(); }
  // Sets `out` to a step of every live sequence, and with `gives` one token each (the last
  // finishes it).
  void GiveTokens(StepOutcome* out, bool gives) {
    out->ran.clear();
    out->events.clear();
    out->timed_sequences = out->timed_tokens = out->running = static_cast<int>(left_.size());
    for (auto it = left_.begin(); it != left_.end();) {
      out->ran.push_back(it->first);
      if (!gives) {
        ++it;
        continue;
      }
      const bool last = --it->second == 0;
      out->events.push_back(
          {.id = it->first,
           .token = 5,
           .finished = last,
           .reason = last ? engine::FinishReason::kLength : engine::FinishReason::kNone});
      it = last ? left_.erase(it) : std::next(it);
    }
  }

 private:
  std::map<engine::SequenceId, int> left_;  // tokens each live sequence has yet to get
};

// Gives every sequence one token every other step, each step lasting kStepDelay, so that a
// sequence's steps are two engine steps apart (as when steps alternate between sequences).
class EveryOtherStepGenerator final : public TokenCountingGenerator {
 public:
  static constexpr std::chrono::milliseconds kStepDelay{3};

  absl::Status Step(StepOutcome* out, absl::FunctionRef<void()> arrivals) override {
    arrivals();
    std::this_thread::sleep_for(kStepDelay);
    GiveTokens(out, /*gives=*/++steps_ % 2 == 0);
    return absl::OkStatus();
  }

 private:
  int64_t steps_ = 0;
};

// Gives every live sequence one token a step. A step first computes (sleeps kStepDelay) and
// only then takes what arrived meanwhile, as the model's pipelined engine does with drafts,
// counting the steps in which something arrived that way.
class ComputeThenPlanGenerator final : public TokenCountingGenerator {
 public:
  static constexpr std::chrono::milliseconds kStepDelay{20};

  absl::Status Step(StepOutcome* out, absl::FunctionRef<void()> arrivals) override {
    std::this_thread::sleep_for(kStepDelay);
    const size_t before = live();
    arrivals();
    if (live() > before) ++joined_while_computing_;
    ++steps_;
    GiveTokens(out, /*gives=*/true);
    return absl::OkStatus();
  }

  int steps() const { return steps_.load(); }
  int joined_while_computing() const { return joined_while_computing_.load(); }

 private:
  std::atomic<int> steps_{0};
  std::atomic<int> joined_while_computing_{0};
};

class EngineProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ipc::SharedSegment> segment = ipc::SharedSegment::Create(
        ipc::SharedSegment::UniqueName(), {.num_workers = 2,
                                           .ring_slots = 64,
                                           .ring_slot_bytes = 4096,
                                           .metrics_bytes = MetricsRegion::BytesFor(1 + 2)});
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = *std::move(segment);
    MetricsRegion::Initialize(segment_.metrics_region());
    header().engine_epoch.store(1);
  }

  void TearDown() override {
    for (auto& link : links_) link.reset();
    if (engine_thread_.joinable()) {
      header().draining.store(1);
      segment_.engine_doorbell().Ring();
      engine_thread_.join();
      EXPECT_TRUE(run_status_.ok()) << run_status_;
    }
    EXPECT_TRUE(segment_.Unlink().ok());
  }

  ipc::SegmentHeader& header() { return *segment_.header(); }
  // What the supervisor's /metrics shows.
  MetricsSnapshot metrics() const { return MetricsRegion(segment_.metrics_region()).Sum(); }

  // What the supervisor does to start an engine, in a thread instead of a process.
  void StartEngine(const std::string& backend) { StartEngine(EngineConfig(backend)); }
  void StartEngine(const config::Config& config) {
    StartLoop(EngineLoop::Create(config, segment_));
  }
  void StartLoop(absl::StatusOr<std::unique_ptr<EngineLoop>> loop) {
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = *std::move(loop);
    engine_thread_ = std::thread([this] { run_status_ = loop_->Run(); });
  }

  RingEngineLink& Link(int index) {
    if (!links_[index]) {
      absl::StatusOr<std::unique_ptr<RingEngineLink>> link =
          RingEngineLink::Create(segment_, index);
      EXPECT_TRUE(link.ok()) << link.status();
      links_[index] = *std::move(link);
    }
    return *links_[index];
  }

  std::future<EngineReply> Submit(RingEngineLink& link, uint64_t id, std::vector<int32_t> prompt,
                                  int max_new_tokens) {
    auto promise = std::make_shared<std::promise<EngineReply>>();
    std::future<EngineReply> future = promise->get_future();
    EngineRequest request;
    request.id = id;
    request.prompt = std::move(prompt);
    request.max_new_tokens = max_new_tokens;
    const absl::Status status =
        link.Submit(std::move(request), [promise](EngineReply r) { promise->set_value(r); });
    EXPECT_TRUE(status.ok()) << status;
    return future;
  }

  // The reply, or a failure after kTimeout: never a hang (e.g. when the engine did not start).
  static EngineReply Get(std::future<EngineReply>& future) {
    if (future.wait_for(kTimeout) != std::future_status::ready) {
      ADD_FAILURE() << "no engine reply within " << kTimeout.count() << " s";
      return EngineReply{.status = absl::DeadlineExceededError("no reply"), .tokens = {}};
    }
    return future.get();
  }

  // `length` ids in [3, 2000), different for each seed (0..2 are the special tokens).
  static std::vector<int32_t> Prompt(int seed, int length = 12) {
    std::vector<int32_t> ids;
    for (int i = 0; i < length; ++i) ids.push_back(3 + (seed * 7919 + i * 104729) % 1997);
    return ids;
  }

  ipc::SharedSegment segment_;
  std::unique_ptr<EngineLoop> loop_;
  std::thread engine_thread_;
  absl::Status run_status_;
  std::unique_ptr<RingEngineLink> links_[2];
};

TEST_F(EngineProcessTest, NotReadyUntilTheEngineRuns) {
  EngineRequest request;
  request.prompt = {1};
  EXPECT_FALSE(Link(0).Ready());
  EXPECT_EQ(Link(0).Submit(request, [](EngineReply) {}).code(), absl::StatusCode::kUnavailable);
  StartEngine("echo");
  EXPECT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  EXPECT_EQ(header().engine_ready_epoch.load(), 1u);
}

TEST_F(EngineProcessTest, EchoAnswersEveryRequestOfEveryWorker) {
  StartEngine("echo");
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready() && Link(1).Ready(); }));
  constexpr int kPerWorker = 500;
  std::vector<std::future<EngineReply>> futures[2];
  for (int i = 0; i < kPerWorker; ++i) {
    for (int w = 0; w < 2; ++w) {
      futures[w].push_back(Submit(Link(w), i, {i, w, i + 1}, 8));
    }
  }
  for (int w = 0; w < 2; ++w) {
    for (int i = 0; i < kPerWorker; ++i) {
      EngineReply reply = Get(futures[w][i]);
      ASSERT_TRUE(reply.status.ok()) << reply.status;
      EXPECT_EQ(reply.tokens, (std::vector<int32_t>{i, w, i + 1}));
      EXPECT_GE(reply.engine_us, 0);
    }
  }
  const MetricsSnapshot m = metrics();
  EXPECT_EQ(m.prompt_tokens, 2u * kPerWorker * 3);
  EXPECT_EQ(m.generated_tokens, 2u * kPerWorker * 3);
  uint64_t steps = 0;
  for (uint64_t count : m.batch_size.counts) steps += count;
  EXPECT_GE(steps, 1u);
  EXPECT_EQ(m.batch_size.sum_units, 2u * kPerWorker) << "every request ran in one step";
  EXPECT_EQ(m.queue_depth, 0);
  const std::string text = FormatPrometheus(m, {});
  EXPECT_THAT(text, HasSubstr(absl::StrCat("gecd_prompt_tokens_total ", 2 * kPerWorker * 3)));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("gecd_generated_tokens_total ", 2 * kPerWorker * 3)));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("gecd_batch_size_count ", steps, "\n")));
}

TEST_F(EngineProcessTest, EchoStepDelaySlowsEveryStepAndCapsItsBatch) {
  config::Config config = EngineConfig("echo");
  config.engine.echo_step_ms = 50;
  config.engine.max_batch_size = 8;
  StartEngine(config);
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  const int64_t delay_us = config.engine.echo_step_ms * 1000;
  const auto start = std::chrono::steady_clock::now();
  // One request starts a step; three batches' worth arrive while it sleeps, so without the cap
  // they would all run in the next step.
  std::vector<std::future<EngineReply>> futures;
  futures.push_back(Submit(Link(0), 0, {3, 7}, 8));
  ASSERT_TRUE(WaitUntil([&] { return metrics().prompt_tokens == 2; }));
  constexpr int kRequests = 1 + 3 * 8;
  for (int i = 1; i < kRequests; ++i) futures.push_back(Submit(Link(0), i, {i + 3, 7}, 8));
  for (int i = 0; i < kRequests; ++i) {
    EngineReply reply = Get(futures[i]);
    ASSERT_TRUE(reply.status.ok()) << reply.status;
    EXPECT_EQ(reply.tokens, (std::vector<int32_t>{i + 3, 7}));
    EXPECT_GE(reply.engine_us, delay_us) << "answered after its step's delay";
  }
  // At least four steps, each no shorter than the delay.
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            4 * std::chrono::milliseconds(config.engine.echo_step_ms));
  const MetricsSnapshot m = metrics();
  EXPECT_EQ(m.batch_size.sum_units, static_cast<uint64_t>(kRequests));
  uint64_t steps = 0;
  for (uint64_t count : m.batch_size.counts) steps += count;
  EXPECT_GE(steps, 4u);
  // Buckets 1, 2, 4, 8, then above: no step ran more than max_batch_size sequences.
  for (size_t b = 4; b < m.batch_size.counts.size(); ++b) {
    EXPECT_EQ(m.batch_size.counts[b], 0u) << "a step above max_batch_size, bucket " << b;
  }
  // Every step timed, none shorter than the delay: the step-time buckets below 50 ms (0.5, 1,
  // 2, 5, 10, 20 ms) are empty.
  uint64_t timed = 0;
  for (uint64_t count : m.step_duration.counts) timed += count;
  EXPECT_EQ(timed, steps);
  for (size_t b = 0; b < 6; ++b) {
    EXPECT_EQ(m.step_duration.counts[b], 0u) << "a step shorter than the delay, bucket " << b;
  }
  EXPECT_GE(m.step_duration.sum_units, steps * static_cast<uint64_t>(delay_us));
}

TEST_F(EngineProcessTest, PublishesStepsAndQueuedWorkForTheWatchdog) {
  config::Config config = EngineConfig("echo");
  config.engine.echo_step_ms = 300;
  StartEngine(config);
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  EXPECT_FALSE(segment_.EngineWorkQueued());
  const uint64_t steps_before = header().engine_steps.load();
  std::future<EngineReply> reply = Submit(Link(0), 1, {3, 7}, 8);
  // Admitted and in its (slow) step: the ring is empty, yet work is queued and no step has
  // finished, which is what the supervisor sees of an engine stuck in a step.
  ASSERT_TRUE(WaitUntil([&] { return metrics().prompt_tokens == 2; }));
  EXPECT_TRUE(segment_.EngineWorkQueued());
  EXPECT_EQ(header().engine_has_work.load(), 1u);
  EXPECT_EQ(header().engine_steps.load(), steps_before);
  EXPECT_TRUE(Get(reply).status.ok());
  EXPECT_TRUE(WaitUntil([&] { return !segment_.EngineWorkQueued(); }));
  EXPECT_GT(header().engine_steps.load(), steps_before);
}

TEST_F(EngineProcessTest, CpuModelGivesWhatTheInProcessEngineGives) {
  const std::vector<int32_t> prompt = Prompt(1, 20);
  // The reference: the same model and options, one sequence, in this process.
  const config::Config config = EngineConfig("cpu");
  auto checkpoint = *model::Checkpoint::Open(config.model.dir);
  auto backend =
      *engine::CpuBackend::Create(*checkpoint, {.kv_cache_mb = config.engine.kv_cache_mb,
                                                .max_step_tokens = config.engine.max_step_tokens,
                                                .max_batch_size = config.engine.max_batch_size});
  engine::Engine reference(backend.get(), nullptr, {.eos_token_ids = {2}});
  engine::GenerationParams params;
  params.max_new_tokens = 20;
  ASSERT_TRUE(reference.AddSequence(1, prompt, params).ok());
  std::vector<int32_t> expected;
  while (reference.HasWork()) {
    absl::StatusOr<std::vector<engine::StepEvent>> events = reference.Step();
    ASSERT_TRUE(events.ok()) << events.status();
    for (const engine::StepEvent& e : *events) {
      if (e.reason != engine::FinishReason::kStopToken) expected.push_back(e.token);
    }
  }

  StartEngine("cpu");
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  std::future<EngineReply> alone = Submit(Link(0), 99, prompt, 20);
  EngineReply reply = Get(alone);
  ASSERT_TRUE(reply.status.ok()) << reply.status;
  EXPECT_EQ(reply.tokens, expected);

  // Many at once from both workers: all answered, within their limits.
  std::vector<std::future<EngineReply>> futures;
  for (int i = 0; i < 16; ++i) {
    futures.push_back(Submit(Link(i % 2), 100 + i, Prompt(i, 3 + i), 1 + i));
  }
  for (int i = 0; i < 16; ++i) {
    EngineReply r = Get(futures[i]);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_GE(r.tokens.size(), 1u);
    EXPECT_LE(r.tokens.size(), static_cast<size_t>(1 + i));
    for (int32_t token : r.tokens) EXPECT_LT(token, 2000);
  }
}

// Admission counts the output tokens a sequence gains per step: 1 without drafts; with them, and
// a copy bias strong enough that the output copies the prompt, the accepted drafts too.
TEST_F(EngineProcessTest, PublishesTheTokensASequenceGainsPerStep) {
  config::Config config = EngineConfig("cpu");
  config.engine.speculate_tokens = 4;
  StartEngine(config);
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  EngineRequest request;
  request.id = 1;
  request.prompt = Prompt(3, 24);
  request.max_new_tokens = 24;
  request.copy_bias = 100;  // far above any logit of the random model: the copy wins
  request.copy_begin = 0;
  request.copy_end = 24;
  std::promise<EngineReply> promise;
  std::future<EngineReply> future = promise.get_future();
  ASSERT_TRUE(
      Link(0).Submit(std::move(request), [&promise](EngineReply r) { promise.set_value(r); }).ok());
  EngineReply reply = Get(future);
  ASSERT_TRUE(reply.status.ok()) << reply.status;
  EXPECT_GT(segment_.tokens_per_step(), 2.0f);
  EXPECT_GT(Link(0).Load().tokens_per_step, 2.0);
}

// Admission multiplies a sentence's steps by the time between two of them, which is the step
// time only when every running sequence runs in every step: with drafts, a step verifies up to
// engine.speculate_tokens positions per sequence, and fed the decoding step's time admission
// admitted several times what the engine answered in time. So what the engine publishes is the
// time between a sequence's steps as measured: here two engine steps, while the step-time metric
// still tells one.
TEST_F(EngineProcessTest, PublishesTheTimeBetweenASequencesSteps) {
  StartLoop(EngineLoop::Create(std::make_unique<EveryOtherStepGenerator>(), segment_));
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  std::future<EngineReply> reply = Submit(Link(0), 1, {5, 6, 7}, 30);
  ASSERT_TRUE(Get(reply).status.ok());

  const double step_us = std::chrono::microseconds(EveryOtherStepGenerator::kStepDelay).count();
  const ipc::StepTime between = segment_.step_time();
  EXPECT_GE(between.fixed_us + between.per_sequence_us, 2 * step_us);
  const MetricsSnapshot m = metrics();
  const double step_time_us = (m.step_fixed_seconds + m.step_per_sequence_seconds) * 1e6;
  EXPECT_GE(step_time_us, step_us);
  EXPECT_LT(step_time_us, between.fixed_us + between.per_sequence_us);
  const worker::EngineLoad load = Link(0).Load();  // what a worker's admission reads
  EXPECT_GE(load.step_fixed_us + load.step_per_sequence_us, 2 * step_us);
}

// An engine that replaces a dead one finds its predecessor's line in the segment and keeps it
// until its own rests on kStepsBeforeReplacingALine steps: its first steps prefill every request
// re-sent to it at once, and a line fitted on them put the fixed part at 45-78 ms against ~1,
// which refused calls while the engine came back (session 34).
TEST_F(EngineProcessTest, AnEngineThatReplacesAnotherKeepsItsLineUntilItHasMeasuredItsOwn) {
  const ipc::StepTime predecessor{.fixed_us = 777, .per_sequence_us = 55};
  segment_.PublishStepTime(predecessor);
  StartLoop(EngineLoop::Create(std::make_unique<EveryOtherStepGenerator>(), segment_));
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  // A token every other step: 2 * 20 steps, fewer than the engine must run first.
  static_assert(2 * 20 < EngineLoop::kStepsBeforeReplacingALine);
  std::future<EngineReply> short_reply = Submit(Link(0), 1, {5, 6, 7}, 20);
  ASSERT_TRUE(Get(short_reply).status.ok());
  EXPECT_EQ(segment_.step_time().fixed_us, predecessor.fixed_us);
  EXPECT_EQ(segment_.step_time().per_sequence_us, predecessor.per_sequence_us);

  std::future<EngineReply> long_reply =
      Submit(Link(0), 2, {5, 6, 7}, EngineLoop::kStepsBeforeReplacingALine);
  ASSERT_TRUE(Get(long_reply).status.ok());
  const double step_us = std::chrono::microseconds(EveryOtherStepGenerator::kStepDelay).count();
  const ipc::StepTime own = segment_.step_time();
  EXPECT_GE(own.fixed_us + own.per_sequence_us, 2 * step_us);
}

// A request that comes in while a step computes is added before the next step is planned, not
// after it: it would wait a whole step more (a closed loop of 8 clients: 2.5 steps from arrival
// to the first token, session 33).
TEST_F(EngineProcessTest, ARequestThatArrivesWhileAStepComputesJoinsTheNextStep) {
  auto owned = std::make_unique<ComputeThenPlanGenerator>();
  const ComputeThenPlanGenerator& generator = *owned;
  StartLoop(EngineLoop::Create(std::move(owned), segment_));
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  // Busy for 60 steps; each later request is sent while one of them computes, all but
  // certainly (the loop's time outside a step is microseconds against 20 ms).
  std::future<EngineReply> busy = Submit(Link(0), 1, {5, 6, 7}, 60);
  std::vector<std::future<EngineReply>> later;
  for (uint64_t id = 2; id <= 4; ++id) {
    const int steps = generator.steps();
    ASSERT_TRUE(WaitUntil([&] { return generator.steps() >= steps + 2; }));
    later.push_back(Submit(Link(0), id, {8, 9}, 2));
  }
  for (std::future<EngineReply>& reply : later) EXPECT_TRUE(Get(reply).status.ok());
  EXPECT_TRUE(Get(busy).status.ok());
  EXPECT_GE(generator.joined_while_computing(), 1);
}

TEST_F(EngineProcessTest, EngineRejectionsComeBackAsErrors) {
  StartEngine("cpu");
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  std::future<EngineReply> no_tokens = Submit(Link(0), 1, {5, 6}, 0);
  std::future<EngineReply> out_of_vocab = Submit(Link(0), 2, {5, 2000}, 4);
  std::future<EngineReply> too_long = Submit(Link(0), 3, {5, 6}, 100'000);
  // Each with the engine's own reason (issue 12: it used to be "the engine rejected the
  // request" for all).
  const absl::Status no_tokens_status = Get(no_tokens).status;
  EXPECT_EQ(no_tokens_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_tokens_status.message(), HasSubstr("max_new_tokens must be at least 1"));
  const absl::Status out_of_vocab_status = Get(out_of_vocab).status;
  EXPECT_EQ(out_of_vocab_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out_of_vocab_status.message(), HasSubstr("token id 2000 outside the vocabulary"));
  const absl::Status too_long_status = Get(too_long).status;
  EXPECT_EQ(too_long_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long_status.message(), HasSubstr("100000 new tokens exceed"));
}

TEST_F(EngineProcessTest, RepliesCarryTheTimeOfTheFirstTokenFromArrival) {
  StartEngine("cpu");
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  const auto now_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  auto promise = std::make_shared<std::promise<EngineReply>>();
  std::future<EngineReply> future = promise->get_future();
  const int64_t arrival_us = now_us();
  ASSERT_TRUE(
      Link(0)
          .Submit({.id = 1, .prompt = Prompt(3), .max_new_tokens = 8, .arrival_us = arrival_us},
                  [promise](EngineReply r) { promise->set_value(r); })
          .ok());
  const EngineReply reply = Get(future);
  const int64_t elapsed_us = now_us() - arrival_us;
  ASSERT_TRUE(reply.status.ok()) << reply.status;
  // The first token comes from the first step that ran the request (it starts queue_us after
  // arrival) and is committed before the last token.
  EXPECT_GE(reply.first_token_us, reply.queue_us);
  EXPECT_GT(reply.first_token_us, 0);
  EXPECT_LE(reply.first_token_us, reply.queue_us + reply.engine_us);
  EXPECT_LE(reply.first_token_us, elapsed_us);
}

TEST_F(EngineProcessTest, ARequestWhoseDeadlinePassedIsAnsweredUnstarted) {
  StartEngine("cpu");
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  auto submit = [&](uint64_t id, int64_t deadline_us) {
    auto promise = std::make_shared<std::promise<EngineReply>>();
    std::future<EngineReply> future = promise->get_future();
    const int64_t now = MonotonicMicros();
    EXPECT_TRUE(Link(0)
                    .Submit({.id = id,
                             .prompt = Prompt(3),
                             .max_new_tokens = 4,
                             .arrival_us = now,
                             .due_us = now,
                             .deadline_us = deadline_us},
                            [promise](EngineReply r) { promise->set_value(r); })
                    .ok());
    return future;
  };
  std::future<EngineReply> late = submit(1, MonotonicMicros() - 1);  // passed on arrival
  std::future<EngineReply> in_time = submit(2, MonotonicMicros() + 60'000'000);
  const EngineReply late_reply = Get(late);
  EXPECT_EQ(late_reply.status.code(), absl::StatusCode::kDeadlineExceeded) << late_reply.status;
  EXPECT_THAT(late_reply.status.message(), HasSubstr("deadline passed while the request waited"));
  EXPECT_EQ(late_reply.engine_us, 0) << "it never ran";
  const EngineReply in_time_reply = Get(in_time);
  EXPECT_TRUE(in_time_reply.status.ok()) << in_time_reply.status;
  EXPECT_EQ(in_time_reply.tokens.size(), 4u);
  EXPECT_EQ(metrics().expired_sequences, 1u);
  EXPECT_THAT(FormatPrometheus(metrics(), {}), HasSubstr("gecd_expired_sequences_total 1\n"));
}

TEST_F(EngineProcessTest, CancelStopsTheSequenceInTheEngine) {
  StartEngine("cpu");
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  std::future<EngineReply> future = Submit(Link(0), 5, Prompt(2), kLong);
  ASSERT_TRUE(WaitUntil([&] { return metrics().prompt_tokens == 12; }));  // admitted
  EXPECT_TRUE(WaitUntil([&] { return metrics().kv_cache_usage > 0; })) << "it is running";
  Link(0).Cancel(5);
  EXPECT_EQ(Get(future).status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(WaitUntil([&] { return metrics().kv_cache_usage == 0; })) << "its blocks are free";
  EXPECT_EQ(metrics().cancelled_sequences, 1u);
  EXPECT_EQ(metrics().queue_depth, 0);
  EXPECT_THAT(FormatPrometheus(metrics(), {}), HasSubstr("gecd_cancelled_sequences_total 1\n"));
}

TEST_F(EngineProcessTest, EngineRestartFailsInFlightRequestsAndServiceResumes) {
  StartEngine("cpu");
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  std::vector<std::future<EngineReply>> futures;
  for (int i = 0; i < 4; ++i) {
    futures.push_back(Submit(Link(0), i, Prompt(3 + i), kLong));
  }
  ASSERT_TRUE(WaitUntil([&] { return metrics().prompt_tokens == 4 * 12; }));

  // The supervisor's view of an engine crash: not ready, then a new epoch for the next engine.
  header().engine_ready_epoch.store(0);
  header().engine_epoch.store(2);
  segment_.engine_doorbell().Ring();
  engine_thread_.join();
  EXPECT_EQ(run_status_.code(), absl::StatusCode::kFailedPrecondition);
  for (auto& f : futures) EXPECT_EQ(Get(f).status.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(Link(0).Ready());

  StartEngine("cpu");
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  std::future<EngineReply> after = Submit(Link(0), 0, Prompt(9), 3);
  EXPECT_TRUE(Get(after).status.ok());
}

TEST_F(EngineProcessTest, DeadWorkerSequencesAreFreedAndItsReplacementServed) {
  StartEngine("cpu");
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready() && Link(1).Ready(); }));
  std::vector<std::future<EngineReply>> orphans;
  for (int i = 0; i < 3; ++i) orphans.push_back(Submit(Link(0), i, Prompt(9), kLong));
  std::future<EngineReply> other = Submit(Link(1), 0, Prompt(9), 5);
  ASSERT_TRUE(WaitUntil([&] { return metrics().prompt_tokens == 4 * 12; }));

  links_[0].reset();  // the worker dies (its link answers what it held, as a process would not)
  segment_.ResetWorkerChannel(0);
  EXPECT_TRUE(WaitUntil([&] { return metrics().cancelled_sequences == 3; }));
  EXPECT_TRUE(Get(other).status.ok()) << "the other worker does not notice";

  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));  // the replacement
  std::future<EngineReply> fresh = Submit(Link(0), 0, {7, 8, 9}, 2);
  EngineReply reply = Get(fresh);
  EXPECT_TRUE(reply.status.ok()) << reply.status;
  EXPECT_EQ(reply.tokens.size(), 2u);
}

TEST_F(EngineProcessTest, DrainingFinishesInFlightWorkThenStops) {
  StartEngine("cpu");
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  // The engine is idle, so Submit publishes at once: the request is in the ring before the
  // supervisor's drain flag.
  std::future<EngineReply> future = Submit(Link(0), 1, Prompt(9), 200);
  header().draining.store(1);
  segment_.engine_doorbell().Ring();
  EngineReply reply = Get(future);
  EXPECT_TRUE(reply.status.ok()) << reply.status;
  EXPECT_FALSE(reply.tokens.empty());
  engine_thread_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_;
}

// The real entry point in a child process, as the supervisor starts it.
TEST_F(EngineProcessTest, RunEngineProcessServesAnotherProcessAndExitsZeroWhenDrained) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(RunEngineProcess(EngineConfig("echo"), segment_.name()));
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  std::future<EngineReply> future = Submit(Link(0), 1, {4, 5, 6}, 8);
  EngineReply reply = Get(future);
  EXPECT_TRUE(reply.status.ok()) << reply.status;
  EXPECT_EQ(reply.tokens, (std::vector<int32_t>{4, 5, 6}));
  header().draining.store(1);
  segment_.engine_doorbell().Ring();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// SIGTERM drains like the draining flag: the request in flight is answered, then exit 0.
TEST_F(EngineProcessTest, RunEngineProcessDrainsOnSigterm) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(RunEngineProcess(EngineConfig("cpu"), segment_.name()));
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));  // signals are blocked by now
  std::future<EngineReply> future = Submit(Link(0), 1, Prompt(4), 300);
  ASSERT_TRUE(WaitUntil([&] { return metrics().prompt_tokens == 12; }));  // admitted
  ASSERT_EQ(kill(child, SIGTERM), 0);
  EngineReply reply = Get(future);
  EXPECT_TRUE(reply.status.ok()) << reply.status;
  EXPECT_FALSE(reply.tokens.empty());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A second signal does not wait for the request in flight.
TEST_F(EngineProcessTest, RunEngineProcessStopsAtASecondSignal) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(RunEngineProcess(EngineConfig("cpu"), segment_.name()));
  ASSERT_TRUE(WaitUntil([&] { return Link(0).Ready(); }));
  std::future<EngineReply> future = Submit(Link(0), 1, Prompt(5), kLong);
  ASSERT_TRUE(WaitUntil([&] { return metrics().prompt_tokens == 12; }));
  // Two different signals, as two of one kind may merge into one pending signal.
  ASSERT_EQ(kill(child, SIGTERM), 0);
  ASSERT_EQ(kill(child, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
  EXPECT_EQ(metrics().generated_tokens, 0u) << "it stopped before answering";
}

TEST_F(EngineProcessTest, CreateReportsAnUnavailableBackendOrModel) {
  // Here there is no usable CUDA device (or no CUDA in the build): a clear error, no engine.
  const absl::Status cuda = EngineLoop::Create(EngineConfig("cuda"), segment_).status();
  EXPECT_FALSE(cuda.ok());
  EXPECT_THAT(std::string(cuda.message()), ::testing::ContainsRegex("CUDA|cuda|device")) << cuda;
  config::Config missing = EngineConfig("cpu");
  missing.model.dir = ModelDir() + "/no-such-model";
  EXPECT_FALSE(EngineLoop::Create(missing, segment_).ok());
  EXPECT_EQ(header().engine_ready_epoch.load(), 0u);
}

TEST_F(EngineProcessTest, CreateNeedsTheEngineMetricsBlock) {
  absl::StatusOr<ipc::SharedSegment> bare = ipc::SharedSegment::Create(
      ipc::SharedSegment::UniqueName(), {.num_workers = 1, .ring_slots = 4});
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(EngineLoop::Create(EngineConfig("echo"), *bare).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(bare->Unlink().ok());
}

// Issue 12: the reason an engine could not start is left in the segment for the supervisor,
// which stops the daemon with it instead of restarting the engine forever.
TEST_F(EngineProcessTest, RunEngineProcessLeavesItsStartUpFailureInTheSegment) {
  config::Config config = EngineConfig("cpu");
  // Blocks of K and V x 2 layers x 2 KV heads x 8 dims x 16 tokens x 4 bytes: one more than
  // the memory this process may use holds.
  const uint64_t blocks = ProcessMemoryLimit().bytes / 4096 + 1;
  if (blocks > INT32_MAX) GTEST_SKIP() << "a machine that big";
  config.engine.kv_cache_blocks = static_cast<int>(blocks);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(RunEngineProcess(config, segment_.name()));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_THAT(segment_.EngineFailure(), HasSubstr("RESOURCE_EXHAUSTED: engine.kv_cache_blocks"));
  EXPECT_EQ(header().engine_ready_epoch.load(), 0u);
}

TEST_F(EngineProcessTest, RunEngineProcessFailsOnAMissingSegment) {
  EXPECT_EQ(RunEngineProcess(EngineConfig("echo"), "/gecd-no-such-segment"), 1);
}

}  // namespace
}  // namespace gecd::engine_host
