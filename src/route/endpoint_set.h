#ifndef GECD_ROUTE_ENDPOINT_SET_H_
#define GECD_ROUTE_ENDPOINT_SET_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "route/endpoint.h"
#include "route/endpoint_source.h"
#include "route/outlier_detector.h"
#include "route/picker.h"
#include "route/slow_start.h"

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
  void Update(std::vector<DiscoveredEndpoint> endpoints);

  // An eligible endpoint by the policy, never `exclude`; nullptr when there is none.
  std::shared_ptr<Endpoint> Pick(const Endpoint* exclude = nullptr);
  // A call on `endpoint` ended with `code`: outlier accounting (may eject it).
  void CallEnded(Endpoint& endpoint, grpc::StatusCode code);

  bool AnyEligible() const;
  Counts counts() const;
  // Known endpoints, by address, including those dropped with calls still in flight.
  std::vector<EndpointStats> Stats() const;

 private:
  struct Candidates {
    std::vector<std::shared_ptr<Endpoint>> endpoints;
  };

  void RebuildLocked();
  void ForgetIdleRetiredLocked();
  void HealthCheckLoop();
  bool HealthCheck(Endpoint& endpoint);

  const Options options_;
  Picker picker_;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_;  // what discovery reports
  std::vector<std::shared_ptr<Endpoint>> retired_;              // dropped, with calls in flight
  bool first_update_ = true;
  uint64_t ejections_ = 0;
  bool stopping_ = false;
  std::condition_variable wake_;

  // The eligible endpoints, swapped whole under candidates_mu_ so a pick copies one pointer.
  mutable std::mutex candidates_mu_;
  std::shared_ptr<const Candidates> candidates_;
  std::atomic<int> eligible_{0};

  std::thread health_thread_;
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_ENDPOINT_SET_H_
