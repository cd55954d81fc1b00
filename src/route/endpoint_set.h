#ifndef GECD_ROUTE_ENDPOINT_SET_H_
#define GECD_ROUTE_ENDPOINT_SET_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "route/endpoint.h"
#include "route/endpoint_source.h"
#include "route/outlier_detector.h"
#include "route/slow_start.h"
#include "route_picker/picker.h"

// The router's endpoints: what discovery reported, turned into Endpoints with channels, states
// (eligible, draining, ejected) and the candidate list the picker draws from. Owns the thread
// that health-checks ejected endpoints (grpc.health.v1) once their back-off has passed. Every
// change of an endpoint's state is logged. Thread-safe.
namespace gecd::route {

class EndpointSet {
 public:
  using Clock = Endpoint::Clock;

  struct Options {
    Policy policy = Policy::kP2c;
    SlowStart slow_start;
    OutlierDetector::Options ejection;
    std::chrono::milliseconds health_check_timeout{1000};
    // TLS to the endpoints (route.upstream_tls) for the health checks, or null: plaintext.
    // Outlives the set.
    const tls::UpstreamTls* tls = nullptr;
  };

  // Per-state counts and lifetime counters, for /metrics.
  struct Counts {
    int eligible = 0;
    int draining = 0;  // discovery says terminating, or dropped with calls still in flight
    int ejected = 0;
    uint64_t ejections = 0;
  };
  struct EndpointStats {
    std::string address;
    Endpoint::State state;
    int64_t in_flight;
    uint64_t requests;
  };

  explicit EndpointSet(Options options);
  ~EndpointSet();  // stops and joins the health-check thread
  EndpointSet(const EndpointSet&) = delete;
  EndpointSet& operator=(const EndpointSet&) = delete;

  // A source's report: the complete current set. New addresses get channels (and, after the
  // first report, slow start); dropped ones stop taking calls and are forgotten when their last
  // call ends.
  void Update(std::vector<DiscoveredEndpoint> endpoints) ABSL_LOCKS_EXCLUDED(mu_);

  // An eligible endpoint by the policy, never `exclude`; nullptr when there is none.
  std::shared_ptr<Endpoint> Pick(const Endpoint* exclude = nullptr)
      ABSL_LOCKS_EXCLUDED(candidates_mu_);
  // A call on `endpoint` ended with `code`: outlier accounting (may eject it).
  void CallEnded(Endpoint& endpoint, grpc::StatusCode code) ABSL_LOCKS_EXCLUDED(mu_);

  bool AnyEligible() const;
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);
  // Known endpoints, by address, including those dropped with calls still in flight.
  std::vector<EndpointStats> Stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Candidates {
    std::vector<std::shared_ptr<Endpoint>> endpoints;
  };

  void RebuildLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) ABSL_LOCKS_EXCLUDED(candidates_mu_);
  void ForgetIdleRetiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HealthCheckLoop() ABSL_LOCKS_EXCLUDED(mu_);
  bool HealthCheck(Endpoint& endpoint);

  const Options options_;
  Picker picker_;

  // Taken before candidates_mu_ (RebuildLocked).
  mutable Mutex mu_;
  // what discovery reports
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_ ABSL_GUARDED_BY(mu_);
  // dropped, with calls in flight
  std::vector<std::shared_ptr<Endpoint>> retired_ ABSL_GUARDED_BY(mu_);
  bool first_update_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t ejections_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  CondVar wake_;  // an ejection (a check may come due sooner) or stopping

  // The eligible endpoints, swapped whole under candidates_mu_ so a pick copies one pointer.
  mutable Mutex candidates_mu_;
  std::shared_ptr<const Candidates> candidates_ ABSL_GUARDED_BY(candidates_mu_);
  std::atomic<int> eligible_{0};

  std::thread health_thread_;
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_ENDPOINT_SET_H_
