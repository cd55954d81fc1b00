#include "metrics/metrics.h"

#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::metrics {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

// Zeroed, 64-byte aligned memory standing in for the segment's metrics region.
class Region {
 public:
  explicit Region(int num_processes)
      : size_(MetricsRegion::BytesFor(num_processes)),
        memory_(static_cast<uint8_t*>(std::aligned_alloc(64, size_))) {}
  ~Region() { std::free(memory_); }
  std::span<uint8_t> span() const { return {memory_, size_}; }

 private:
  size_t size_;
  uint8_t* memory_;
};

// The samples of a Prometheus text page, "name{labels}" -> value, and the TYPE of each family;
// fails the test on any line that is not a comment or a well-formed sample, or on a sample
// whose family has no HELP and TYPE line before it.
struct Exposition {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
};

Exposition Parse(const std::string& text) {
  Exposition e;
  std::map<std::string, bool> helped;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "# HELP ")) {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      EXPECT_EQ(parts.size(), 4u) << line;
      helped[parts[2]] = true;
      continue;
    }
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      EXPECT_EQ(parts.size(), 4u) << line;
      EXPECT_TRUE(helped[parts[2]]) << "TYPE before HELP: " << line;
      EXPECT_TRUE(e.types.emplace(parts[2], parts[3]).second) << "second TYPE: " << line;
      continue;
    }
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, absl::string_view::npos) << line;
    const std::string key(line.substr(0, space));
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &value)) << line;
    std::string family = key.substr(0, key.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (absl::EndsWith(family, suffix) && !e.types.count(family)) {
        family = family.substr(0, family.size() - std::string(suffix).size());
      }
    }
    EXPECT_TRUE(e.types.count(family)) << "sample without TYPE: " << line;
    EXPECT_TRUE(e.samples.emplace(key, value).second) << "duplicate sample: " << line;
  }
  return e;
}

TEST(MetricsTest, SumsEveryProcessBlock) {
  Region memory(3);
  MetricsRegion region = MetricsRegion::Initialize(memory.span());
  ASSERT_EQ(region.num_processes(), 3);
  ProcessMetrics* engine = region.ForProcess(MetricsRegion::kEngineIndex);
  ProcessMetrics* w0 = region.ForProcess(MetricsRegion::WorkerIndex(0));
  ProcessMetrics* w1 = region.ForProcess(MetricsRegion::WorkerIndex(1));
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(region.ForProcess(3), nullptr);
  EXPECT_EQ(region.ForProcess(-1), nullptr);
  EXPECT_NE(w0, w1);

  w0->RequestAdmitted();
  w0->RequestAdmitted();
  w1->RequestAdmitted();
  w0->RequestReleased();
  w0->RequestFinished(0, 0.002);
  w1->RequestFinished(0, 0.3);
  w1->RequestFinished(8, 0.0001);   // RESOURCE_EXHAUSTED
  w1->RequestFinished(99, 0.0001);  // not a gRPC code: UNKNOWN
  w0->ObserveTimeToFirstToken(0.05);
  engine->ObserveBatch(3, 0.004);
  engine->ObserveBatch(100, 0.03);
  engine->AddPromptTokens(50);
  engine->AddGeneratedTokens(7);
  engine->SequenceCancelled();
  engine->SequenceExpired();
  engine->SequenceExpired();
  engine->SetKvCacheUsage(0.25);
  engine->SetQueueDepth(4);
  engine->SetStepTime(0.004, 0.0005);

  // A second view of the same memory, as a child process maps it.
  const MetricsSnapshot s = MetricsRegion(memory.span()).Sum();
  EXPECT_EQ(s.requests[0], 2u);
  EXPECT_EQ(s.requests[8], 1u);
  EXPECT_EQ(s.requests[2], 1u);
  EXPECT_EQ(s.concurrency, 2);
  EXPECT_EQ(s.prompt_tokens, 50u);
  EXPECT_EQ(s.generated_tokens, 7u);
  EXPECT_EQ(s.cancelled_sequences, 1u);
  EXPECT_DOUBLE_EQ(s.kv_cache_usage, 0.25);
  EXPECT_EQ(s.queue_depth, 4);
  EXPECT_DOUBLE_EQ(s.step_fixed_seconds, 0.004);
  EXPECT_DOUBLE_EQ(s.step_per_sequence_seconds, 0.0005);
  EXPECT_EQ(s.request_duration.sum_units, 2000u + 300000u + 100u + 100u);
  EXPECT_EQ(s.time_to_first_token.sum_units, 50000u);
  EXPECT_EQ(s.batch_size.sum_units, 103u);
  EXPECT_EQ(s.step_duration.sum_units, 34000u);  // microseconds
}

TEST(MetricsTest, ResetGaugesKeepsCounters) {
  Region memory(1);
  MetricsRegion region = MetricsRegion::Initialize(memory.span());
  ProcessMetrics* m = region.ForProcess(0);
  m->RequestAdmitted();
  m->SetQueueDepth(9);
  m->SetKvCacheUsage(0.5);
  m->SetStepTime(0.004, 0.0005);
  m->RequestFinished(0, 0.01);
  m->AddGeneratedTokens(3);
  m->SetRefusalsHeld(40, true);
  m->RefusalStormBegun();
  m->ResetGauges();
  const MetricsSnapshot s = region.Sum();
  EXPECT_EQ(s.refusals_held, 0);
  EXPECT_EQ(s.refusal_storm_workers, 0);
  EXPECT_EQ(s.refusal_storms, 1u);
  EXPECT_EQ(s.concurrency, 0);
  EXPECT_EQ(s.queue_depth, 0);
  EXPECT_EQ(s.kv_cache_usage, 0);
  EXPECT_EQ(s.step_fixed_seconds, 0);
  EXPECT_EQ(s.step_per_sequence_seconds, 0);
  EXPECT_EQ(s.requests[0], 1u);
  EXPECT_EQ(s.generated_tokens, 3u);
}

TEST(MetricsTest, ConcurrentWritersLoseNothing) {
  Region memory(2);
  MetricsRegion region = MetricsRegion::Initialize(memory.span());
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      ProcessMetrics* m = region.ForProcess(t % 2);
      for (int i = 0; i < kPerThread; ++i) {
        m->RequestAdmitted();
        m->RequestFinished(0, 0.000001);
        m->RequestReleased();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const MetricsSnapshot s = region.Sum();
  EXPECT_EQ(s.requests[0], 4u * kPerThread);
  EXPECT_EQ(s.request_duration.sum_units, 4u * kPerThread);
  EXPECT_EQ(s.concurrency, 0);
}

// gecd_client_requests_total: summed by name over the workers' blocks, absent without clients
// (daemon/client_counters_test.cc tests the table itself).
TEST(MetricsTest, ClientRequestsAreSummedByNameAcrossWorkers) {
  Region memory(3);
  MetricsRegion region = MetricsRegion::Initialize(memory.span());
  EXPECT_EQ(FormatPrometheus(region.Sum(), {}).find("gecd_client_requests_total"),
            std::string::npos);
  region.ForProcess(1)->ClientRequestFinished("frontend", 0);
  region.ForProcess(2)->ClientRequestFinished("frontend", 0);
  region.ForProcess(2)->ClientRequestFinished("frontend", 8);
  const Exposition e = Parse(FormatPrometheus(region.Sum(), {}));
  EXPECT_EQ(e.types.at("gecd_client_requests_total"), "counter");
  EXPECT_EQ(e.samples.at("gecd_client_requests_total{client=\"frontend\",code=\"OK\"}"), 2);
  EXPECT_EQ(
      e.samples.at("gecd_client_requests_total{client=\"frontend\",code=\"RESOURCE_EXHAUSTED\"}"),
      1);
}

TEST(MetricsTest, PrometheusTextIsWellFormed) {
  Region memory(2);
  MetricsRegion region = MetricsRegion::Initialize(memory.span());
  ProcessMetrics* engine = region.ForProcess(0);
  ProcessMetrics* worker = region.ForProcess(1);
  worker->RequestFinished(0, 0.001);  // on the 0.001 bound: in that bucket
  worker->RequestFinished(0, 0.0011);
  worker->RequestFinished(14, 0.7);  // UNAVAILABLE
  worker->RequestFinished(0, 60);    // above every bound: only +Inf
  worker->RequestAdmitted();
  worker->RequestShed(ProcessMetrics::kShedSlo, ProcessMetrics::kShedInteractive);
  worker->RequestShed(ProcessMetrics::kShedSlo, ProcessMetrics::kShedInteractive);
  worker->RequestShed(ProcessMetrics::kShedSlo, ProcessMetrics::kShedBatch);
  worker->RequestShed(ProcessMetrics::kShedDeadline, ProcessMetrics::kShedInteractive);
  worker->RequestWithinObjective();
  worker->RequestWithinObjective();
  worker->ObservePredictionRatio(0.8);
  worker->ObservePredictionRatio(1.0);
  worker->ObservePredictionRatio(9);
  worker->StreamOpened();
  worker->SetRefusalsHeld(7, false);
  worker->SetRefusalsHeld(120, true);
  worker->RefusalStormBegun();
  worker->RefusalStormBegun();
  worker->RefusalStormLeftForGrowth();
  engine->ObserveBatch(1, 0.0004);
  engine->ObserveBatch(2, 0.003);
  engine->ObserveBatch(5000, 5.0);
  engine->AddSpeculativeTokens(7, 2);
  engine->AddSpeculativeTokens(1, 0);
  engine->ObserveTokensPerSequenceStep(1);
  engine->ObserveTokensPerSequenceStep(5);
  engine->ObserveTokensPerSequenceStep(9);
  engine->SequenceCancelled();
  engine->SequenceExpired();
  engine->SequenceExpired();
  engine->SetKvCacheUsage(0.125);

  MetricsSnapshot snapshot = region.Sum();
  snapshot.admission_step_fixed_seconds = 0.006;  // the supervisor's, from the segment
  snapshot.admission_step_per_sequence_seconds = 0.0004;
  snapshot.admission_late_mark = 1.25;
  snapshot.admission_late_mark_in_flight = 310;
  const Exposition e = Parse(FormatPrometheus(snapshot, {{"engine", 1}, {"worker", 3}}));
  EXPECT_EQ(e.types.at("gecd_requests_total"), "counter");
  EXPECT_EQ(e.types.at("gecd_request_concurrency"), "gauge");
  EXPECT_EQ(e.types.at("gecd_request_duration_seconds"), "histogram");
  EXPECT_EQ(e.types.at("gecd_time_to_first_token_seconds"), "histogram");
  EXPECT_EQ(e.types.at("gecd_batch_size"), "histogram");
  EXPECT_EQ(e.types.at("gecd_admission_prediction_ratio"), "histogram");
  for (const char* name :
       {"gecd_prompt_tokens_total", "gecd_generated_tokens_total", "gecd_cancelled_sequences_total",
        "gecd_expired_sequences_total", "gecd_process_restarts_total",
        "gecd_goodput_requests_total", "gecd_tls_connections_refused_total",
        "gecd_refusal_storms_total", "gecd_refusal_storms_left_for_growth_total"}) {
    EXPECT_EQ(e.types.at(name), "counter") << name;
  }
  EXPECT_EQ(e.types.at("gecd_kv_cache_usage_ratio"), "gauge");
  EXPECT_EQ(e.types.at("gecd_queue_depth"), "gauge");
  EXPECT_EQ(e.types.at("gecd_engine_step_fixed_seconds"), "gauge");
  EXPECT_EQ(e.types.at("gecd_engine_step_per_sequence_seconds"), "gauge");
  EXPECT_EQ(e.types.at("gecd_admission_margin"), "gauge");
  EXPECT_EQ(e.samples.at("gecd_admission_margin"), 1);
  EXPECT_EQ(e.types.at("gecd_admission_step_fixed_seconds"), "gauge");
  EXPECT_EQ(e.types.at("gecd_admission_step_per_sequence_seconds"), "gauge");
  EXPECT_EQ(e.samples.at("gecd_admission_step_fixed_seconds"), 0.006);
  EXPECT_EQ(e.samples.at("gecd_admission_step_per_sequence_seconds"), 0.0004);
  EXPECT_EQ(e.types.at("gecd_admission_late_mark"), "gauge");
  EXPECT_EQ(e.samples.at("gecd_admission_late_mark"), 1.25);
  EXPECT_EQ(e.types.at("gecd_admission_late_mark_in_flight"), "gauge");
  EXPECT_EQ(e.samples.at("gecd_admission_late_mark_in_flight"), 310);
  EXPECT_EQ(e.types.at("gecd_requests_shed_total"), "counter");
  EXPECT_EQ(e.types.at("gecd_open_streams"), "gauge");
  EXPECT_EQ(e.types.at("gecd_speculative_tokens_total"), "counter");
  EXPECT_EQ(e.types.at("gecd_tokens_per_sequence_step"), "histogram");

  EXPECT_EQ(e.samples.at("gecd_requests_total{code=\"OK\"}"), 3);
  EXPECT_EQ(e.samples.at("gecd_requests_total{code=\"UNAVAILABLE\"}"), 1);
  EXPECT_FALSE(e.samples.count("gecd_requests_total{code=\"CANCELLED\"}"));
  EXPECT_EQ(e.samples.at("gecd_request_concurrency"), 1);
  EXPECT_EQ(e.samples.at("gecd_cancelled_sequences_total"), 1);
  EXPECT_EQ(e.samples.at("gecd_expired_sequences_total"), 2);
  EXPECT_EQ(e.samples.at("gecd_tls_connections_refused_total"), 0);
  EXPECT_EQ(e.types.at("gecd_refusals_held"), "gauge");
  EXPECT_EQ(e.types.at("gecd_refusal_storm_workers"), "gauge");
  EXPECT_EQ(e.samples.at("gecd_refusals_held"), 120);
  EXPECT_EQ(e.samples.at("gecd_refusal_storm_workers"), 1);
  EXPECT_EQ(e.samples.at("gecd_refusal_storms_total"), 2);
  EXPECT_EQ(e.samples.at("gecd_refusal_storms_left_for_growth_total"), 1);
  // Every reason and class is exported from the start, so rate() works before the first refusal.
  const std::string shed = "gecd_requests_shed_total";
  EXPECT_EQ(e.samples.at(shed + "{reason=\"max_in_flight\",priority=\"interactive\"}"), 0);
  EXPECT_EQ(e.samples.at(shed + "{reason=\"max_in_flight\",priority=\"batch\"}"), 0);
  EXPECT_EQ(e.samples.at(shed + "{reason=\"slo\",priority=\"interactive\"}"), 2);
  EXPECT_EQ(e.samples.at(shed + "{reason=\"slo\",priority=\"batch\"}"), 1);
  EXPECT_EQ(e.samples.at(shed + "{reason=\"deadline\",priority=\"interactive\"}"), 1);
  EXPECT_EQ(e.samples.at(shed + "{reason=\"deadline\",priority=\"batch\"}"), 0);
  EXPECT_EQ(e.samples.at("gecd_goodput_requests_total"), 2);
  EXPECT_EQ(e.samples.at("gecd_admission_prediction_ratio_bucket{le=\"0.75\"}"), 0);
  EXPECT_EQ(e.samples.at("gecd_admission_prediction_ratio_bucket{le=\"0.9\"}"), 1);
  EXPECT_EQ(e.samples.at("gecd_admission_prediction_ratio_bucket{le=\"1\"}"), 2);
  EXPECT_EQ(e.samples.at("gecd_admission_prediction_ratio_bucket{le=\"4\"}"), 2);
  EXPECT_EQ(e.samples.at("gecd_admission_prediction_ratio_count"), 3);
  EXPECT_EQ(e.samples.at("gecd_open_streams"), 1);
  EXPECT_EQ(e.samples.at("gecd_speculative_tokens_total{result=\"accepted\"}"), 8);
  EXPECT_EQ(e.samples.at("gecd_speculative_tokens_total{result=\"rejected\"}"), 2);
  const std::string t = "gecd_tokens_per_sequence_step";
  EXPECT_EQ(e.samples.at(t + "_bucket{le=\"1\"}"), 1);
  EXPECT_EQ(e.samples.at(t + "_bucket{le=\"4\"}"), 1);
  EXPECT_EQ(e.samples.at(t + "_bucket{le=\"6\"}"), 2);
  EXPECT_EQ(e.samples.at(t + "_bucket{le=\"12\"}"), 3);
  EXPECT_EQ(e.samples.at(t + "_sum"), 15);
  EXPECT_EQ(e.samples.at("gecd_kv_cache_usage_ratio"), 0.125);
  EXPECT_EQ(e.samples.at("gecd_process_restarts_total{process=\"engine\"}"), 1);
  EXPECT_EQ(e.samples.at("gecd_process_restarts_total{process=\"worker\"}"), 3);

  // Buckets are cumulative, never decrease, and end in +Inf == _count.
  const std::string d = "gecd_request_duration_seconds";
  EXPECT_EQ(e.samples.at(d + "_bucket{le=\"0.001\"}"), 1);
  EXPECT_EQ(e.samples.at(d + "_bucket{le=\"0.0025\"}"), 2);
  EXPECT_EQ(e.samples.at(d + "_bucket{le=\"0.5\"}"), 2);
  EXPECT_EQ(e.samples.at(d + "_bucket{le=\"1\"}"), 3);
  EXPECT_EQ(e.samples.at(d + "_bucket{le=\"10\"}"), 3);
  EXPECT_EQ(e.samples.at(d + "_bucket{le=\"+Inf\"}"), 4);
  EXPECT_EQ(e.samples.at(d + "_count"), 4);
  EXPECT_NEAR(e.samples.at(d + "_sum"), 0.001 + 0.0011 + 0.7 + 60, 1e-6);
  for (const std::string h : {"gecd_request_duration_seconds", "gecd_time_to_first_token_seconds",
                              "gecd_batch_size", "gecd_engine_step_seconds"}) {
    std::map<double, double> by_bound;  // le -> cumulative count, in numeric order
    for (const auto& [key, value] : e.samples) {
      if (!absl::StartsWith(key, h + "_bucket{le=\"")) continue;
      const std::string le = key.substr(h.size() + 12, key.size() - h.size() - 14);
      double bound = std::numeric_limits<double>::infinity();
      if (le != "+Inf") {
        EXPECT_TRUE(absl::SimpleAtod(le, &bound)) << key;
      }
      by_bound[bound] = value;
    }
    double previous = 0;
    for (const auto& [bound, count] : by_bound) {
      EXPECT_GE(count, previous) << h << " le=" << bound;
      previous = count;
    }
    const size_t buckets = by_bound.size();
    EXPECT_GE(buckets, 10u) << h;
    EXPECT_TRUE(by_bound.count(std::numeric_limits<double>::infinity())) << h;
    EXPECT_EQ(e.samples.at(h + "_bucket{le=\"+Inf\"}"), e.samples.at(h + "_count")) << h;
  }
  EXPECT_EQ(e.samples.at("gecd_batch_size_bucket{le=\"1\"}"), 1);
  EXPECT_EQ(e.samples.at("gecd_batch_size_bucket{le=\"2\"}"), 2);
  EXPECT_EQ(e.samples.at("gecd_batch_size_bucket{le=\"1024\"}"), 2);
  EXPECT_EQ(e.samples.at("gecd_batch_size_count"), 3);
  EXPECT_EQ(e.samples.at("gecd_batch_size_sum"), 5003);
  // Step times in their own bounds: below a millisecond, and beyond the largest (2 s).
  EXPECT_EQ(e.samples.at("gecd_engine_step_seconds_bucket{le=\"0.0005\"}"), 1);
  EXPECT_EQ(e.samples.at("gecd_engine_step_seconds_bucket{le=\"0.002\"}"), 1);
  EXPECT_EQ(e.samples.at("gecd_engine_step_seconds_bucket{le=\"0.005\"}"), 2);
  EXPECT_EQ(e.samples.at("gecd_engine_step_seconds_bucket{le=\"2\"}"), 2);
  EXPECT_EQ(e.samples.at("gecd_engine_step_seconds_bucket{le=\"+Inf\"}"), 3);
  EXPECT_NEAR(e.samples.at("gecd_engine_step_seconds_sum"), 5.0034, 1e-6);
}

}  // namespace
}  // namespace gecd::metrics
