#include "loadgen/speculation_counters.h"

#include <string>

#include "common/loopback.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::loadgen {
namespace {

using ::testing::HasSubstr;

// Two pages of one daemon, as /metrics writes them, a run apart.
constexpr char kBefore[] = R"(# TYPE gecd_speculative_tokens_total counter
gecd_speculative_tokens_total{result="accepted"} 100
gecd_speculative_tokens_total{result="rejected"} 20
# TYPE gecd_tokens_per_sequence_step histogram
gecd_tokens_per_sequence_step_bucket{le="1"} 10
gecd_tokens_per_sequence_step_sum 150.000000
gecd_tokens_per_sequence_step_count 50
)";
constexpr char kAfter[] = R"(# TYPE gecd_speculative_tokens_total counter
gecd_speculative_tokens_total{result="accepted"} 1000
gecd_speculative_tokens_total{result="rejected"} 120
# TYPE gecd_tokens_per_sequence_step histogram
gecd_tokens_per_sequence_step_bucket{le="1"} 40
gecd_tokens_per_sequence_step_sum 1350.000000
gecd_tokens_per_sequence_step_count 350
)";

TEST(SpeculationCountersTest, TheRunsShareOfAcceptedDraftsAndTokensPerStep) {
  const SpeculationCounters run =
      ParseSpeculationCounters(kAfter).Since(ParseSpeculationCounters(kBefore));
  EXPECT_DOUBLE_EQ(run.accepted, 900);
  EXPECT_DOUBLE_EQ(run.rejected, 100);
  EXPECT_DOUBLE_EQ(run.acceptance(), 0.9);
  EXPECT_DOUBLE_EQ(run.tokens_per_sequence_step(), 4.0);  // 1200 tokens in 300 sequence-steps
  EXPECT_EQ(run.Summary(),
            "speculative decoding: 90.0% of 1000 draft tokens accepted, 4.00 tokens per "
            "sequence-step");
  EXPECT_DOUBLE_EQ(run.ToJson()["acceptance"].get<double>(), 0.9);
}

TEST(SpeculationCountersTest, ADaemonWithoutDraftsSaysSo) {
  const SpeculationCounters none = ParseSpeculationCounters("gecd_requests_total 5\n");
  EXPECT_DOUBLE_EQ(none.acceptance(), 0);
  EXPECT_DOUBLE_EQ(none.tokens_per_sequence_step(), 0);
  EXPECT_EQ(none.Summary(), "speculative decoding: no drafts verified");
}

TEST(SpeculationCountersTest, APortWithNoDaemonIsAnErrorNamingIt) {
  absl::StatusOr<int> port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status();
  absl::StatusOr<SpeculationCounters> counters = ReadSpeculationCounters(*port);
  ASSERT_FALSE(counters.ok());
  EXPECT_THAT(std::string(counters.status().message()),
              HasSubstr("--metrics-port " + std::to_string(*port)));
}

}  // namespace
}  // namespace gecd::loadgen
