#include "daemon/health_poller.h"

#include <utility>

#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace gecd::daemon {

HealthPoller::HealthPoller(grpc::HealthCheckServiceInterface* health, Subject subject,
                           std::chrono::milliseconds period)
    : health_(health), subject_(std::move(subject)), period_(period) {
  // The default health service starts out SERVING; correct it before anyone can ask twice.
  const bool serving = subject_.ready();
  // Naming a service once registers it; from then on SetServingStatus(bool) and Shutdown set
  // every registered name along with "".
  for (const std::string& service : subject_.services) health_->SetServingStatus(service, serving);
  health_->SetServingStatus(serving);
  // The loop starts from what was set, not from a second reading: a change between the two
  // (the thread may start late on a loaded machine) would otherwise never be published.
  thread_ = std::thread([this, serving] { Loop(serving); });
}

void HealthPoller::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;  // ends the loop's AwaitWithTimeout
  }
  if (thread_.joinable()) thread_.join();
}

void HealthPoller::Loop(bool serving) {
  MutexLock lock(&mu_);
  // True when stopping_ is (else period_ has passed).
  while (!mu_.AwaitWithTimeout(&stopping_, period_)) {
    const bool ready = subject_.ready();
    if (ready == serving) continue;
    serving = ready;
    spdlog::info("{}: health {}", ready ? subject_.ready_text : subject_.not_ready_text,
                 ready ? "SERVING" : "NOT_SERVING");
    health_->SetServingStatus(ready);
  }
}

}  // namespace gecd::daemon
