#include "loadgen/load_runner.h"

#include <numeric>

#include "echo_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::loadgen {
namespace {

RunConfig ConfigFor(const testing::EchoServer& server) {
  RunConfig config;
  config.targets = {server.target()};
  config.channels = 4;
  config.threads = 2;
  config.duration_s = 1.0;
  config.warmup_s = 0.2;
  config.sentences = {"He go home.", "She like cats and dogs."};
  return config;
}

// Every request sent in the window is answered and the timeline adds up to the totals.
void ExpectAllAnswered(const RunResult& result) {
  EXPECT_EQ(result.error_count(), 0u);
  EXPECT_EQ(result.ok, result.sent);
  EXPECT_GT(result.ok_latency.Percentile(0.5), 0);
  uint64_t sent = 0, ok = 0;
  for (const SecondStats& s : result.timeline) {
    sent += s.sent;
    ok += s.ok;
  }
  EXPECT_EQ(sent, result.sent);
  EXPECT_EQ(ok, result.ok);
}

// The error fraction is 1/4 give or take the requests on either side of the window.
void ExpectQuarterRejected(const RunResult& result) {
  const uint64_t rejected =
      result.errors.count("RESOURCE_EXHAUSTED") ? result.errors.at("RESOURCE_EXHAUSTED") : 0;
  EXPECT_EQ(rejected, result.error_count());
  EXPECT_EQ(result.ok + rejected, result.sent);
  EXPECT_NEAR(static_cast<double>(rejected) / result.sent, 0.25, 0.05);
}

class LoadRunnerTest : public ::testing::TestWithParam<bool> {};

TEST_P(LoadRunnerTest, ClosedLoopAnswersEveryRequest) {
  testing::EchoServer server;
  RunConfig config = ConfigFor(server);
  config.stream = GetParam();
  config.concurrency = 8;
  absl::StatusOr<RunResult> result = RunLoad(config);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->ok, 50u);  // an echo answers thousands a second; this box may be loaded
  ExpectAllAnswered(*result);
  EXPECT_GE(server.answered(), result->ok);
}

// Every connection sends every sentence, also when the sentences are a multiple of the
// connections (before: sentence k always went on channel k, so each server worker saw only its
// connections' sentences).
TEST(LoadRunnerLanesTest, EveryChannelSendsEverySentence) {
  testing::EchoServer server;
  RunConfig config = ConfigFor(server);
  config.sentences = {"One.", "Two.", "Three.", "Four."};
  config.concurrency = 8;
  absl::StatusOr<RunResult> result = RunLoad(config);
  ASSERT_TRUE(result.ok()) << result.status();
  const auto texts = server.texts_by_peer();
  EXPECT_EQ(texts.size(), 4u);  // config.channels
  for (const auto& [peer, sent] : texts) {
    EXPECT_EQ(sent.size(), 4u) << peer;
  }
}

TEST_P(LoadRunnerTest, OpenLoopSendsAtTheOfferedRate) {
  testing::EchoServer server;
  RunConfig config = ConfigFor(server);
  config.stream = GetParam();
  config.profile = RateProfile::Constant(400);
  absl::StatusOr<RunResult> result = RunLoad(config);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_NEAR(static_cast<double>(result->sent), 400, 5 * 20);  // Poisson: sd = sqrt(400)
  ExpectAllAnswered(*result);
}

TEST_P(LoadRunnerTest, RejectionsShowUpByCode) {
  testing::EchoServer server({.reject_every = 4});
  RunConfig config = ConfigFor(server);
  config.stream = GetParam();
  config.concurrency = 4;
  absl::StatusOr<RunResult> result = RunLoad(config);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_GT(result->sent, 100u);
  ExpectQuarterRejected(*result);
}

// A client honouring the server's pushback waits it out before the slot's next send; one that
// does not re-sends at once.
TEST(LoadRunnerPushbackTest, AClosedLoopHonouringPushbackWaitsBeforeResending) {
  testing::EchoServer server({.reject_every = 1, .pushback_ms = 100});
  RunConfig config = ConfigFor(server);
  config.concurrency = 4;
  config.honor_pushback = true;
  absl::StatusOr<RunResult> honoured = RunLoad(config);
  ASSERT_TRUE(honoured.ok()) << honoured.status();
  // Four slots, one send each per 100 ms, plus the sends at the window's edges.
  const double at_most = 4 * (config.warmup_s + config.duration_s) / 0.1 + 8;
  EXPECT_LE(static_cast<double>(honoured->sent), at_most);
  EXPECT_GT(honoured->sent, 0u);
  EXPECT_EQ(honoured->refused, honoured->sent);
  config.honor_pushback = false;
  absl::StatusOr<RunResult> at_once = RunLoad(config);
  ASSERT_TRUE(at_once.ok()) << at_once.status();
  EXPECT_GT(static_cast<double>(at_once->sent), 5 * at_most);
}

TEST(LoadRunnerStreamTest, SentencesAStreamNeverAnswersAreUnanswered) {
  testing::EchoServer server({.drop_every = 10});
  RunConfig config = ConfigFor(server);
  config.stream = true;
  config.profile = RateProfile::Constant(400);
  absl::StatusOr<RunResult> result = RunLoad(config);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->errors.size(), 1u);
  const uint64_t unanswered = result->errors.at("UNANSWERED");
  EXPECT_EQ(result->ok + unanswered, result->sent);
  EXPECT_NEAR(static_cast<double>(unanswered) / result->sent, 0.1, 0.03);
}

INSTANTIATE_TEST_SUITE_P(UnaryAndStream, LoadRunnerTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Stream" : "Unary"; });

TEST(LoadRunnerTargetsTest, ChannelsAndLoadSpreadOverEveryTarget) {
  testing::EchoServer a;
  testing::EchoServer b;
  RunConfig config = ConfigFor(a);
  config.targets = {a.target(), b.target()};
  config.profile = RateProfile::Constant(400);
  absl::StatusOr<RunResult> result = RunLoad(config);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectAllAnswered(*result);
  // Requests go round-robin over 4 channels, two on each server: an even split (warm-up and
  // drain answers included), whatever the arrival times.
  const uint64_t total = a.answered() + b.answered();
  EXPECT_GE(total, result->ok);
  EXPECT_LE(a.answered() > b.answered() ? a.answered() - b.answered() : b.answered() - a.answered(),
            1u);
}

TEST(LoadRunnerTargetsTest, AnUnreachableTargetIsNamed) {
  testing::EchoServer up;
  std::string gone_target;
  {
    testing::EchoServer gone;
    gone_target = gone.target();
  }
  RunConfig config = ConfigFor(up);
  config.targets = {up.target(), gone_target};
  absl::StatusOr<RunResult> result = RunLoad(config);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(result.status().message()), ::testing::HasSubstr(gone_target));
}

TEST(LoadRunnerErrorsTest, EveryTargetNeedsAChannel) {
  RunConfig config;
  config.sentences = {"x"};
  config.targets = {"127.0.0.1:1", "127.0.0.1:2"};
  config.channels = 1;
  EXPECT_EQ(RunLoad(config).status().code(), absl::StatusCode::kInvalidArgument);
  config.targets.clear();
  EXPECT_EQ(RunLoad(config).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LoadRunnerErrorsTest, NoServerIsUnavailable) {
  std::string target;
  {
    testing::EchoServer gone;
    target = gone.target();
  }
  RunConfig config;
  config.targets = {target};
  config.sentences = {"x"};
  EXPECT_EQ(RunLoad(config).status().code(), absl::StatusCode::kUnavailable);
}

TEST(LoadRunnerErrorsTest, NoSentencesIsAnError) {
  RunConfig config;
  EXPECT_EQ(RunLoad(config).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gecd::loadgen
