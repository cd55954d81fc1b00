#ifndef GECD_DAEMON_HEALTH_POLLER_H_
#define GECD_DAEMON_HEALTH_POLLER_H_

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "grpcpp/health_check_service_interface.h"

// Keeps a gRPC server's grpc.health.v1 answer in step with a readiness test, for the whole
// server ("") and for each of Subject::services by name (gRPC's default health service answers
// NOT_FOUND for a name it was never given, which fails a probe or proxy configured with the
// service name): sets it at once, then polls the test every `period` on a thread of its own and
// logs each change. Owns that thread; Stop (or the destructor) joins it, and the answer is left as
// it was, for the owner to shut down.
namespace gecd::daemon {

class HealthPoller {
 public:
  struct Subject {
    std::function<bool()> ready;
    std::string ready_text;      // logged on a change to ready, e.g. "engine ready"
    std::string not_ready_text;  // ... and back, e.g. "engine not ready"
    // Answered by name as well as "", e.g. "gecd.v1.GrammarCorrection".
    std::vector<std::string> services;
  };

  HealthPoller(grpc::HealthCheckServiceInterface* health, Subject subject,
               std::chrono::milliseconds period);
  ~HealthPoller() { Stop(); }
  HealthPoller(const HealthPoller&) = delete;
  HealthPoller& operator=(const HealthPoller&) = delete;

  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Polls the subject every period; `serving` is the status the constructor set.
  void Loop(bool serving) ABSL_LOCKS_EXCLUDED(mu_);

  grpc::HealthCheckServiceInterface* const health_;
  const Subject subject_;
  const std::chrono::milliseconds period_;
  Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_HEALTH_POLLER_H_
