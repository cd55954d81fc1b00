#include "load/daemon_candidate.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "load/report.h"

namespace gecd::load {

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
  // /metrics through it; `done` ends it early when the run fails.
  std::mutex mu;
  std::condition_variable changed;
  std::optional<std::pair<Clock::time_point, Clock::time_point>> window;
  bool done = false;
  config.on_window = [&](Clock::time_point from, Clock::time_point to) {
    std::lock_guard lock(mu);
    window.emplace(from, to);
    changed.notify_all();
  };
  std::vector<double> samples;
  std::thread sampler([&] {
    std::unique_lock lock(mu);
    changed.wait(lock, [&] { return done || window.has_value(); });
    if (done) return;
    const auto [from, to] = *window;
    changed.wait_until(lock, from, [&] { return done; });
    while (!done && Clock::now() < to) {
      lock.unlock();
      const std::optional<double> v = server_->Metric("gecd_request_concurrency");
      lock.lock();
      if (v.has_value()) samples.push_back(*v);
      changed.wait_for(lock, std::chrono::milliseconds(100), [&] { return done; });
    }
  });
  absl::StatusOr<RunResult> result = RunLoad(config);
  {
    std::lock_guard lock(mu);
    done = true;
    changed.notify_all();
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

}  // namespace gecd::load
