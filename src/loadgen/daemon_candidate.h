#ifndef GECD_LOADGEN_DAEMON_CANDIDATE_H_
#define GECD_LOADGEN_DAEMON_CANDIDATE_H_

#include <memory>

#include "loadgen/load_runner.h"
#include "loadgen/serve_process.h"
#include "loadgen/tuner.h"

namespace gecd::loadgen {

// gecd tune's CandidateServer: a `gecd serve` it started, driven by RunLoad. `run` is the shape
// of every trial (its targets are replaced by the daemon's address, its profile by the trial's
// rate); the probe is the same run in closed loop with `probe_concurrency` in flight. While a
// trial's window runs, the daemon's gecd_request_concurrency is sampled every 100 ms.
class DaemonCandidate : public CandidateServer {
 public:
  DaemonCandidate(std::unique_ptr<ServeProcess> server, RunConfig run, int probe_concurrency);

  absl::StatusOr<TrialMeasurement> RunTrial(double qps) override;
  absl::StatusOr<double> ProbeCapacity() override;

 private:
  std::unique_ptr<ServeProcess> server_;
  RunConfig run_;
  int probe_concurrency_;
};

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_DAEMON_CANDIDATE_H_
