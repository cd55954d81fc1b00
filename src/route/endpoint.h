#ifndef GECD_ROUTE_ENDPOINT_H_
#define GECD_ROUTE_ENDPOINT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>  // std::once_flag
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "grpcpp/channel.h"
#include "route/outlier_detector.h"
#include "tls/upstream_tls.h"

// One backend daemon as the router sees it: its address, the counters the picker and /metrics
// read, its outlier state, and a gRPC channel for its health checks (calls go through the
// relay's own connections; TLS like them with route.upstream_tls). Calls hold a shared_ptr to it,
// so an endpoint that discovery dropped lives on until its last call ends: a change of the endpoint
// set never cuts a call off.
namespace gecd::route {

class Endpoint {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { kEligible, kDraining, kEjected };

  // `tls`: the router's TLS to the endpoints (outlives the endpoint), or null: plaintext.
  Endpoint(std::string address, OutlierDetector::Options ejection,
           const tls::UpstreamTls* tls = nullptr);

  const std::string& address() const { return address_; }
  // For health checks, connected on first use (over TLS with `tls`).
  const std::shared_ptr<grpc::Channel>& channel();

  void CallStarted() {
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    requests_.fetch_add(1, std::memory_order_relaxed);
  }
  // The call's answer, for outlier ejection. True when it ejected the endpoint.
  bool CallEnded(grpc::StatusCode code, Clock::time_point now) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }

  // The outlier state, under the endpoint's lock.
  bool ejected() const ABSL_LOCKS_EXCLUDED(mu_);
  bool DueForCheck(Clock::time_point now) const ABSL_LOCKS_EXCLUDED(mu_);
  void RecordCheck(bool passed, Clock::time_point now) ABSL_LOCKS_EXCLUDED(mu_);
  std::chrono::milliseconds back_off() const ABSL_LOCKS_EXCLUDED(mu_);

  // Written by the EndpointSet under its lock; read by pickers without it.
  std::atomic<bool> draining{false};
  std::atomic<Clock::rep> eligible_since{0};  // steady_clock ticks; slow start runs from here
  std::atomic<bool> removed{false};           // discovery dropped it: connections close once idle

 private:
  const std::string address_;
  const tls::UpstreamTls* const tls_;
  std::once_flag channel_once_;
  std::shared_ptr<grpc::Channel> channel_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> requests_{0};
  mutable Mutex mu_;
  OutlierDetector outlier_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_ENDPOINT_H_
