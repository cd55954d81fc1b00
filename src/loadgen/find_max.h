#ifndef GECD_LOADGEN_FIND_MAX_H_
#define GECD_LOADGEN_FIND_MAX_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"

namespace gecd::loadgen {

struct FindMaxOptions {
  double start_qps = 100;
  double growth = 2;        // offered rate multiplier while every trial passes
  double precision = 0.05;  // bisection stops when (fail - pass) <= precision * fail
  int max_trials = 16;
  double slo_p99_s = 1;
  double max_error_rate = 0.01;
  // A failed trial is run again up to this many times, and the rate passes if a run does: on a
  // shared machine one stall of the host fails a trial, and with it the search halved the
  // capacity it found (admission bench, session 20: short 150 req/s, against 267 served at
  // p99 456 ms by a closed loop of 64 in the same run).
  int confirm_failures = 1;
};

// What one trial at an offered rate measured. The search reads the first three.
struct TrialMeasurement {
  double achieved_qps = 0;
  double p99_s = 0;
  double error_rate = 0;      // errors / completed
  double mean_latency_s = 0;  // of OK answers: with achieved_qps, Little's law's concurrency
  // The server's own mean of requests in flight (gecd_request_concurrency) over the trial,
  // where it was sampled; < 0 when not.
  double server_concurrency = -1;
};

struct Trial {
  double offered_qps = 0;
  TrialMeasurement measured;
  bool passed = false;
};

struct FindMaxResult {
  double max_qps = 0;  // the highest offered rate that passed; 0 if none did
  std::vector<Trial> trials;
};

using TrialFn = std::function<absl::StatusOr<TrialMeasurement>(double offered_qps)>;

// The highest offered rate whose p99 meets the SLO with errors under the threshold: multiplies
// the rate by `growth` until a trial fails, then bisects between the best pass and the lowest
// fail (each failure confirmed, see confirm_failures). Assumes that passing is (noisily)
// monotone in the rate. on_trial sees each trial as it ends; max_trials counts every run; the
// first failed trial run aborts the search.
absl::StatusOr<FindMaxResult> FindMaxQps(const FindMaxOptions& options, const TrialFn& run_trial,
                                         const std::function<void(const Trial&)>& on_trial);

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_FIND_MAX_H_
