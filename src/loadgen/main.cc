// gecd-load: the load generator for gecd serve. See kLoadUsage (gecd-load --help).

#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "loadgen/load_options.h"
#include "loadgen/run_report.h"
#include "loadgen/speculation_counters.h"
#include "loadgen/typing_session.h"

namespace gecd::loadgen {
namespace {

// A timed run, or the typing sessions (--typing-sessions).
absl::Status RunOnce(const LoadOptions& options) {
  std::vector<TypingSession> sessions;
  if (options.typing.sessions > 0) {
    ASSIGN_OR_RETURN(sessions, MakeTypingSessions(options.run.sentences, options.typing));
  }
  SpeculationCounters before;
  if (options.metrics_port > 0) {
    ASSIGN_OR_RETURN(before, ReadSpeculationCounters(options.metrics_port));
  }
  nlohmann::json json;
  if (options.typing.sessions > 0) {
    ASSIGN_OR_RETURN(
        const TypingResult result,
        RunTypingSessions(options.run, sessions, options.typing.sentences_per_paragraph));
    WriteTypingTable(options.typing, result, std::cout);
    json = TypingJson(options.typing, result);
  } else {
    ASSIGN_OR_RETURN(const RunResult result, RunLoad(options.run));
    WriteTable(result, std::cout);
    json = ToJson(result);
    if (!options.csv_path.empty()) {
      std::ostringstream csv;
      WriteTimelineCsv(result, csv);
      RETURN_IF_ERROR(WriteStringToFile(options.csv_path, csv.str()));
    }
  }
  if (options.metrics_port > 0) {
    ASSIGN_OR_RETURN(const SpeculationCounters after,
                     ReadSpeculationCounters(options.metrics_port));
    const SpeculationCounters run = after.Since(before);
    std::cout << run.Summary() << "\n";
    json["speculation"] = run.ToJson();
  }
  if (!options.json_path.empty()) {
    RETURN_IF_ERROR(WriteStringToFile(options.json_path, json.dump(2) + "\n"));
  }
  return absl::OkStatus();
}

absl::Status FindMax(const LoadOptions& options) {
  const TrialFn trial = [&options](double qps) -> absl::StatusOr<TrialMeasurement> {
    RunConfig config = options.run;
    config.profile = RateProfile::Constant(qps);
    ASSIGN_OR_RETURN(RunResult result, RunLoad(config));
    return ToTrialMeasurement(result);
  };
  std::cout << absl::StrFormat("%12s %12s %12s %10s  %s\n", "offered_qps", "achieved_qps", "p99_ms",
                               "errors_%", "verdict");
  const auto print = [](const Trial& t) {
    std::cout << absl::StrFormat("%12.1f %12.1f %12.3f %10.3f  %s\n", t.offered_qps,
                                 t.measured.achieved_qps, t.measured.p99_s * 1e3,
                                 t.measured.error_rate * 100, t.passed ? "pass" : "fail")
              << std::flush;
  };
  ASSIGN_OR_RETURN(FindMaxResult result, FindMaxQps(options.find_max_options, trial, print));
  std::cout << absl::StrFormat("max qps meeting p99 <= %.3f s, errors <= %.2f%%: %.1f\n",
                               options.find_max_options.slo_p99_s,
                               options.find_max_options.max_error_rate * 100, result.max_qps);
  if (!options.json_path.empty()) {
    nlohmann::json trials = nlohmann::json::array();
    for (const Trial& t : result.trials) {
      trials.push_back({{"offered_qps", t.offered_qps},
                        {"achieved_qps", t.measured.achieved_qps},
                        {"p99_ms", t.measured.p99_s * 1e3},
                        {"error_rate", t.measured.error_rate},
                        {"passed", t.passed}});
    }
    nlohmann::json json = {{"slo_p99_s", options.find_max_options.slo_p99_s},
                           {"max_error_rate", options.find_max_options.max_error_rate},
                           {"max_qps", result.max_qps},
                           {"trials", trials}};
    RETURN_IF_ERROR(WriteStringToFile(options.json_path, json.dump(2) + "\n"));
  }
  return absl::OkStatus();
}

absl::Status Main(int argc, char** argv) {
  ASSIGN_OR_RETURN(LoadOptions options,
                   ParseLoadOptions(std::vector<std::string>(argv + 1, argv + argc)));
  if (options.help) {
    std::cout << kLoadUsage;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(options.run.sentences,
                   ReadSentences(options.input_path, options.text_separator));
  return options.find_max ? FindMax(options) : RunOnce(options);
}

}  // namespace
}  // namespace gecd::loadgen

int main(int argc, char** argv) {
  // As in gecd's main (src/cli/main.cc): Debian's Abseil is built without NDEBUG, and lock-order
  // graphs for every absl::Mutex (gRPC's and the runner's) would slow the generator down.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const absl::Status status = gecd::loadgen::Main(argc, argv);
  if (status.ok()) return 0;
  std::cerr << "gecd-load: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}
