#include "loadgen/run_report.h"

#include <cstdio>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"
#include "loadgen/load_recorder.h"

namespace gecd::loadgen {
namespace {

using std::chrono::milliseconds;

// Two seconds of window after a one-second warmup: latencies 10 ms and 30 ms in second 0, an
// error in second 1, and a warmup request that must not count.
RunResult SampleRun() {
  const Clock::time_point start = Clock::time_point() + std::chrono::hours(1);
  LoadRecorder recorder(start + milliseconds(1000), start + milliseconds(3000), milliseconds(20));
  recorder.RecordSent(start + milliseconds(500));
  recorder.RecordDone(start + milliseconds(500), start + milliseconds(1100), 0, 40);
  for (int at : {1000, 1100, 1900}) recorder.RecordSent(start + milliseconds(at));
  recorder.RecordDone(start + milliseconds(1000), start + milliseconds(1010), 0, 40);
  recorder.RecordDone(start + milliseconds(1100), start + milliseconds(1130), 0, 300);
  recorder.RecordDone(start + milliseconds(1900), start + milliseconds(2050), 8, 40);
  return recorder.Finish();
}

TEST(LoadRecorderTest, CountsTheWindowOnlyAndBinsByCompletionSecond) {
  const RunResult result = SampleRun();
  EXPECT_DOUBLE_EQ(result.duration_s, 2.0);
  EXPECT_DOUBLE_EQ(result.elapsed_s, 2.0);
  EXPECT_EQ(result.sent, 3u);
  EXPECT_EQ(result.ok, 2u);
  EXPECT_EQ(result.error_count(), 1u);
  EXPECT_EQ(result.errors.at("RESOURCE_EXHAUSTED"), 1u);
  EXPECT_EQ(result.refused, 1u);
  EXPECT_EQ(result.refused_latency.max(), 150000);
  EXPECT_DOUBLE_EQ(result.achieved_qps(), 1.0);
  EXPECT_EQ(result.ok_latency.max(), 30000);
  // The objective is 20 ms: the 10 ms answer is goodput, the 30 ms one is not.
  EXPECT_EQ(result.within_objective, 1u);
  EXPECT_DOUBLE_EQ(result.goodput_qps(), 0.5);
  EXPECT_EQ(result.ok_latency_by_length[LengthBucketOf(40)].count(), 1u);
  EXPECT_EQ(result.ok_latency_by_length[LengthBucketOf(40)].max(), 10000);
  EXPECT_EQ(result.ok_latency_by_length[LengthBucketOf(300)].max(), 30000);
  ASSERT_EQ(result.timeline.size(), 2u);
  EXPECT_EQ(result.timeline[0].sent, 3u);
  EXPECT_EQ(result.timeline[0].ok, 2u);
  EXPECT_EQ(result.timeline[1].errors, 1u);
}

TEST(LoadRecorderTest, AchievedRateCountsTheDrainAfterTheWindow) {
  const Clock::time_point start = Clock::time_point() + std::chrono::hours(1);
  LoadRecorder recorder(start, start + milliseconds(1000), milliseconds(1000));
  for (int at : {0, 500, 900}) {
    recorder.RecordSent(start + milliseconds(at));
    recorder.RecordDone(start + milliseconds(at), start + milliseconds(at + 1100), 0, 40);
  }
  const RunResult result = recorder.Finish();
  EXPECT_DOUBLE_EQ(result.duration_s, 1.0);
  EXPECT_DOUBLE_EQ(result.elapsed_s, 2.0);
  EXPECT_DOUBLE_EQ(result.achieved_qps(), 1.5);
}

TEST(LoadRecorderTest, AClosedLoopCountsWhatCompletesInsideTheWindow) {
  const Clock::time_point start = Clock::time_point() + std::chrono::hours(1);
  LoadRecorder recorder(start + milliseconds(1000), start + milliseconds(2000), milliseconds(500),
                        LoadRecorder::Counting::kByCompletionTime);
  // Sent in the warmup, answered inside the window: counted.
  recorder.RecordDone(start + milliseconds(900), start + milliseconds(1200), 0, 40);
  // Inside the window: an answer and a refusal held for 400 ms.
  recorder.RecordSent(start + milliseconds(1200));
  recorder.RecordDone(start + milliseconds(1200), start + milliseconds(1300), 0, 40);
  recorder.RecordSent(start + milliseconds(1500));
  recorder.RecordDone(start + milliseconds(1500), start + milliseconds(1900), 8, 40);
  // Sent inside the window, refused three seconds later: not counted, and the rate is not
  // stretched to wait for it.
  recorder.RecordSent(start + milliseconds(1950));
  recorder.RecordDone(start + milliseconds(1950), start + milliseconds(4950), 8, 40);
  const RunResult result = recorder.Finish();
  EXPECT_EQ(result.sent, 2u + 1u);
  EXPECT_EQ(result.ok, 2u);
  EXPECT_EQ(result.refused, 1u);
  EXPECT_DOUBLE_EQ(result.elapsed_s, 1.0);
  EXPECT_DOUBLE_EQ(result.goodput_qps(), 2.0);
  EXPECT_EQ(result.refused_latency.max(), 400000);
}

TEST(LoadRecorderTest, LengthBucketsAreNamedByTheirBytes) {
  EXPECT_EQ(LengthBucketOf(0), 0u);
  EXPECT_EQ(LengthBucketOf(63), 0u);
  EXPECT_EQ(LengthBucketOf(64), 1u);
  EXPECT_EQ(LengthBucketOf(255), 2u);
  EXPECT_EQ(LengthBucketOf(100000), 3u);
  EXPECT_EQ(LengthBucketName(0), "0-63 B");
  EXPECT_EQ(LengthBucketName(2), "128-255 B");
  EXPECT_EQ(LengthBucketName(3), "256+ B");
}

TEST(StatusCodeNameTest, NamesGrpcCodes) {
  EXPECT_EQ(StatusCodeName(0), "OK");
  EXPECT_EQ(StatusCodeName(4), "DEADLINE_EXCEEDED");
  EXPECT_EQ(StatusCodeName(14), "UNAVAILABLE");
  EXPECT_EQ(StatusCodeName(16), "UNAUTHENTICATED");
  EXPECT_EQ(StatusCodeName(99), "CODE_99");
  EXPECT_EQ(StatusCodeName(kUnanswered), "UNANSWERED");
}

// Percentiles come from log buckets: within 1/32 per second, 1/128 overall.
TEST(ReportTest, CsvHasOneRowPerSecond) {
  std::ostringstream csv;
  WriteTimelineCsv(SampleRun(), csv);
  std::istringstream lines(csv.str());
  std::string header, first, second, extra;
  std::getline(lines, header);
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_FALSE(std::getline(lines, extra));
  EXPECT_EQ(header, "t,sent,ok,errors,p50_ms,p99_ms");
  int t, sent, ok, errors;
  double p50, p99;
  ASSERT_EQ(std::sscanf(first.c_str(), "%d,%d,%d,%d,%lf,%lf", &t, &sent, &ok, &errors, &p50, &p99),
            6)
      << first;
  EXPECT_EQ(std::vector<int>({t, sent, ok, errors}), std::vector<int>({0, 3, 2, 0}));
  EXPECT_NEAR(p50, 10.0, 10.0 / 32);
  EXPECT_NEAR(p99, 30.0, 30.0 / 32);
  EXPECT_EQ(second, "1,0,0,1,0.000,0.000");
}

TEST(ReportTest, JsonCarriesTotalsPercentilesAndCodes) {
  const nlohmann::json json = ToJson(SampleRun());
  EXPECT_EQ(json["sent"], 3);
  EXPECT_EQ(json["ok"], 2);
  EXPECT_EQ(json["errors"], 1);
  EXPECT_EQ(json["errors_by_code"]["RESOURCE_EXHAUSTED"], 1);
  EXPECT_DOUBLE_EQ(json["achieved_qps"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(json["goodput_qps"].get<double>(), 0.5);
  EXPECT_EQ(json["within_objective"], 1);
  EXPECT_EQ(json["latency_ms_by_length"]["0-63 B"]["ok"], 1);
  EXPECT_NEAR(json["latency_ms_by_length"]["256+ B"]["p99"].get<double>(), 30.0, 30.0 / 128);
  EXPECT_FALSE(json["latency_ms_by_length"].contains("64-127 B"));
  EXPECT_NEAR(json["latency_ms"]["p50"].get<double>(), 10.0, 10.0 / 128);
  EXPECT_NEAR(json["latency_ms"]["p99"].get<double>(), 30.0, 30.0 / 128);
  EXPECT_NEAR(json["latency_ms"]["p99.9"].get<double>(), 30.0, 30.0 / 128);
  EXPECT_DOUBLE_EQ(json["latency_ms"]["max"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(json["latency_ms"]["mean"].get<double>(), 20.0);
  // The refusal (RESOURCE_EXHAUSTED after 150 ms) on its own, not in the OK percentiles.
  EXPECT_EQ(json["refused"]["count"], 1);
  EXPECT_NEAR(json["refused"]["rate"].get<double>(), 1.0 / 3, 1e-9);
  EXPECT_NEAR(json["refused"]["latency_ms"]["p99"].get<double>(), 150.0, 150.0 / 128);
  EXPECT_DOUBLE_EQ(json["refused"]["latency_ms"]["max"].get<double>(), 150.0);
}

TEST(ReportTest, TableShowsQpsPercentilesAndErrorCodes) {
  std::ostringstream table;
  WriteTable(SampleRun(), table);
  const std::string text = table.str();
  EXPECT_NE(text.find("achieved qps"), std::string::npos) << text;
  EXPECT_NE(text.find("latency p99.9"), std::string::npos) << text;
  EXPECT_NE(text.find("RESOURCE_EXHAUSTED"), std::string::npos) << text;
  EXPECT_NE(text.find("1 (33.3% of completed)"), std::string::npos) << text;
  EXPECT_NE(text.find("refused p99"), std::string::npos) << text;
  EXPECT_NE(text.find("goodput"), std::string::npos) << text;
  EXPECT_NE(text.find("p99 256+ B"), std::string::npos) << text;
}

}  // namespace
}  // namespace gecd::loadgen
