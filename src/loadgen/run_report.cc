#include "loadgen/run_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gecd::loadgen {
namespace {

double Ms(int64_t micros) { return micros / 1000.0; }

constexpr double kQuantiles[] = {0.5, 0.9, 0.99, 0.999};
constexpr const char* kQuantileNames[] = {"p50", "p90", "p99", "p99.9"};

}  // namespace

void WriteTable(const RunResult& result, std::ostream& out) {
  out << absl::StrFormat("%-16s %12.1f s\n", "duration", result.duration_s);
  out << absl::StrFormat("%-16s %12.1f s\n", "until last reply", result.elapsed_s);
  out << absl::StrFormat("%-16s %12u\n", "sent", result.sent);
  out << absl::StrFormat("%-16s %12u\n", "ok", result.ok);
  out << absl::StrFormat("%-16s %12u\n", "errors", result.error_count());
  out << absl::StrFormat("%-16s %12.1f req/s\n", "achieved qps", result.achieved_qps());
  out << absl::StrFormat("%-16s %12.1f req/s (%u OK within the objective)\n", "goodput",
                         result.goodput_qps(), result.within_objective);
  for (size_t i = 0; i < std::size(kQuantiles); ++i) {
    out << absl::StrFormat("%-16s %12.3f ms\n", absl::StrCat("latency ", kQuantileNames[i]),
                           Ms(result.ok_latency.Percentile(kQuantiles[i])));
  }
  out << absl::StrFormat("%-16s %12.3f ms\n", "latency max", Ms(result.ok_latency.max()));
  for (size_t b = 0; b < kLengthBuckets; ++b) {
    const LatencyHistogram& h = result.ok_latency_by_length[b];
    if (h.count() == 0) continue;
    out << absl::StrFormat("%-16s %12.3f ms (%u OK)\n", absl::StrCat("p99 ", LengthBucketName(b)),
                           Ms(h.Percentile(0.99)), h.count());
  }
  for (const auto& [code, count] : result.errors) {
    out << absl::StrFormat("%-16s %12u\n", absl::StrCat("  ", code), count);
  }
  if (result.refused > 0) {
    out << absl::StrFormat("%-16s %12u (%.1f%% of completed)\n", "refused", result.refused,
                           result.refused_rate() * 100);
    for (size_t i : {size_t{0}, size_t{2}}) {
      out << absl::StrFormat("%-16s %12.3f ms\n", absl::StrCat("refused ", kQuantileNames[i]),
                             Ms(result.refused_latency.Percentile(kQuantiles[i])));
    }
    out << absl::StrFormat("%-16s %12.3f ms\n", "refused max", Ms(result.refused_latency.max()));
  }
}

nlohmann::json ToJson(const RunResult& result) {
  nlohmann::json latency = {{"mean", result.ok_latency.mean() / 1000.0},
                            {"max", Ms(result.ok_latency.max())}};
  for (size_t i = 0; i < std::size(kQuantiles); ++i) {
    latency[kQuantileNames[i]] = Ms(result.ok_latency.Percentile(kQuantiles[i]));
  }
  nlohmann::json by_length = nlohmann::json::object();
  for (size_t b = 0; b < kLengthBuckets; ++b) {
    const LatencyHistogram& h = result.ok_latency_by_length[b];
    if (h.count() == 0) continue;
    by_length[LengthBucketName(b)] = {
        {"ok", h.count()}, {"p50", Ms(h.Percentile(0.5))}, {"p99", Ms(h.Percentile(0.99))}};
  }
  nlohmann::json refused = {{"count", result.refused},
                            {"rate", result.refused_rate()},
                            {"latency_ms",
                             {{"p50", Ms(result.refused_latency.Percentile(0.5))},
                              {"p99", Ms(result.refused_latency.Percentile(0.99))},
                              {"max", Ms(result.refused_latency.max())}}}};
  return {{"duration_s", result.duration_s},
          {"elapsed_s", result.elapsed_s},
          {"sent", result.sent},
          {"ok", result.ok},
          {"errors", result.error_count()},
          {"errors_by_code", result.errors},
          {"achieved_qps", result.achieved_qps()},
          {"goodput_qps", result.goodput_qps()},
          {"within_objective", result.within_objective},
          {"latency_ms_by_length", by_length},
          {"latency_ms", latency},
          {"refused", refused}};
}

TrialMeasurement ToTrialMeasurement(const RunResult& result) {
  const uint64_t completed = result.ok + result.error_count();
  return TrialMeasurement{
      .achieved_qps = result.achieved_qps(),
      .p99_s = result.ok_latency.Percentile(0.99) / 1e6,
      .error_rate = completed == 0 ? 1.0 : result.error_count() / double(completed),
      .mean_latency_s = result.ok_latency.mean() / 1e6};
}

void WriteTimelineCsv(const RunResult& result, std::ostream& out) {
  out << "t,sent,ok,errors,p50_ms,p99_ms\n";
  for (size_t t = 0; t < result.timeline.size(); ++t) {
    const SecondStats& s = result.timeline[t];
    out << absl::StrFormat("%u,%u,%u,%u,%.3f,%.3f\n", t, s.sent, s.ok, s.errors,
                           Ms(s.ok_latency.Percentile(0.5)), Ms(s.ok_latency.Percentile(0.99)));
  }
}

}  // namespace gecd::loadgen
