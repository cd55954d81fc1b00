#include "loadgen/daemon_candidate.h"

#include <chrono>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "loadgen/run_report.h"

namespace gecd::loadgen {

DaemonCandidate::DaemonCandidate(std::unique_ptr<ServeProcess> server, RunConfig run,
                                 int probe_concurrency)
    : server_(std::move(server)), run_(std::move(run)), probe_concurrency_(probe_concurrency) {
  run_.targets = {server_->grpc_target()};
}

absl::StatusOr<TrialMeasurement> DaemonCandidate::RunTrial(double qps) {
  RunConfig config = run_;
  config.concurrency = 0;
  config.profile = RateProfile::Constant(qps);
  // The sampler waits for the window (it starts once the channels are connected), then polls
  // /metrics through it; `done` ends it early when the run fails. All three are guarded by mu
  // (locals, so only by this comment: the analysis checks members).
  Mutex mu;
  std::optional<std::pair<Clock::time_point, Clock::time_point>> window;
  bool done = false;
  config.on_window = [&](Clock::time_point from, Clock::time_point to) {
    MutexLock lock(&mu);
    window.emplace(from, to);
  };
  std::vector<double> samples;
  std::thread sampler([&] {
    mu.Lock();
    const auto done_or_window = [&] { return done || window.has_value(); };
    mu.Await(done_or_window);
    if (!done) {
      const auto [from, to] = *window;
      mu.AwaitWithTimeout(&done, from - Clock::now());
      while (!done && Clock::now() < to) {
        mu.Unlock();
        const std::optional<double> v = server_->Metric("gecd_request_concurrency");
        mu.Lock();
        if (v.has_value()) samples.push_back(*v);
        mu.AwaitWithTimeout(&done, std::chrono::milliseconds(100));
      }
    }
    mu.Unlock();
  });
  absl::StatusOr<RunResult> result = RunLoad(config);
  {
    MutexLock lock(&mu);
    done = true;
  }
  sampler.join();
  RETURN_IF_ERROR(result.status());
  TrialMeasurement measured = ToTrialMeasurement(*result);
  if (!samples.empty()) {
    double sum = 0;
    for (const double s : samples) sum += s;
    measured.server_concurrency = sum / samples.size();
  }
  return measured;
}

absl::StatusOr<double> DaemonCandidate::ProbeCapacity() {
  RunConfig config = run_;
  config.concurrency = probe_concurrency_;
  ASSIGN_OR_RETURN(const RunResult result, RunLoad(config));
  return result.achieved_qps();
}

}  // namespace gecd::loadgen
