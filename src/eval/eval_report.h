#ifndef GECD_EVAL_EVAL_REPORT_H_
#define GECD_EVAL_EVAL_REPORT_H_

#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "eval/corrector.h"
#include "eval/jfleg.h"
#include "eval/synthetic.h"
#include "nlohmann/json.hpp"

// `gecd eval`'s scoring and its two reports: GLEU on JFLEG against the copy-the-source baseline,
// exact match per error type on the synthetic set, throughput, the agreement of a compared
// system, and the gate, as the printed summary and as JSON.
namespace gecd::eval {

// One configuration under test and what it produced.
struct System {
  std::string name;   // "model" or "compare"
  std::string where;  // "model DIR" or "server HOST:PORT"
  CorrectionRun run;  // over EvalSets::texts
};

// What was evaluated. The systems ran on `texts`: JFLEG's sources (detokenized) first, then
// the synthetic set's.
struct EvalSets {
  const JflegSet* jfleg = nullptr;                           // null: not evaluated
  const std::vector<SyntheticExample>* synthetic = nullptr;  // null or empty: not evaluated
  std::string synthetic_path;
  std::vector<std::string> texts;
};

struct ReportOptions {
  int gleu_iterations = 500;
  bool include_outputs = false;  // every output in the JSON
  // The gate: a failure when "model" misses either (NaN: not checked).
  double min_gleu_delta = std::numeric_limits<double>::quiet_NaN();
  double max_false_change_rate = std::numeric_limits<double>::quiet_NaN();
};

struct Report {
  std::string summary;                     // the text `gecd eval` prints
  std::vector<std::string> gate_failures;  // empty: the gate passed (or none was asked for)
};

// Scores `systems` (the first is "model") on `sets` and adds "throughput", "jfleg", "outputs",
// "synthetic" and "gate" to `report`, as they apply. Errors: scoring failed (e.g. outputs that
// do not match the sets).
absl::StatusOr<Report> ScoreSystems(const EvalSets& sets, const std::vector<System>& systems,
                                    const ReportOptions& options, nlohmann::ordered_json* report);

}  // namespace gecd::eval

#endif  // GECD_EVAL_EVAL_REPORT_H_
