#include "loadgen/find_max.h"

#include "common/status_macros.h"

namespace gecd::loadgen {

absl::StatusOr<FindMaxResult> FindMaxQps(const FindMaxOptions& options, const TrialFn& run_trial,
                                         const std::function<void(const Trial&)>& on_trial) {
  if (!(options.start_qps > 0) || !(options.growth > 1) || !(options.precision > 0)) {
    return absl::InvalidArgumentError("find-max needs start_qps > 0, growth > 1, precision > 0");
  }
  FindMaxResult result;
  double pass = 0;  // the highest rate that passed
  double fail = 0;  // the lowest rate that failed; 0 until one has
  double next = options.start_qps;
  int failed_runs = 0;  // of the rate `next`, so far
  while (static_cast<int>(result.trials.size()) < options.max_trials) {
    Trial trial;
    trial.offered_qps = next;
    ASSIGN_OR_RETURN(trial.measured, run_trial(next));
    trial.passed = trial.measured.p99_s <= options.slo_p99_s &&
                   trial.measured.error_rate <= options.max_error_rate;
    result.trials.push_back(trial);
    if (on_trial) on_trial(trial);
    if (!trial.passed && failed_runs++ < options.confirm_failures) continue;  // once more
    failed_runs = 0;
    if (trial.passed) {
      pass = std::max(pass, next);
    } else {
      fail = fail == 0 ? next : std::min(fail, next);
    }
    if (fail == 0) {
      next *= options.growth;
      continue;
    }
    if (fail - pass <= options.precision * fail) break;
    next = (pass + fail) / 2;
  }
  result.max_qps = pass;
  return result;
}

}  // namespace gecd::loadgen
