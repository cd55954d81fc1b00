#ifndef GECD_ROUTE_ENDPOINT_H_
#define GECD_ROUTE_ENDPOINT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/channel_arguments.h"
#include "route/outlier_detector.h"

// One backend daemon as the router sees it. Owns its HTTP/2 channels (route.
// channels_per_endpoint, each its own connection) and the counters the picker and /metrics
// read. Calls hold a shared_ptr to it, so an endpoint that discovery dropped lives on, with its
// connections, until its last call ends: a change of the endpoint set never cuts a call off.
namespace gecd::route {

class Endpoint {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { kEligible, kDraining, kEjected };

  Endpoint(std::string address, int channels, OutlierDetector::Options ejection);

  const std::string& address() const { return address_; }
  // The channels in turn, so the calls spread over the connections.
  grpc::GenericStub& stub();
  // A channel for health checks (the first).
  const std::shared_ptr<grpc::Channel>& channel() const { return channels_.front(); }

  void CallStarted() {
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    requests_.fetch_add(1, std::memory_order_relaxed);
  }
  // The call's answer, for outlier ejection. True when it ejected the endpoint.
  bool CallEnded(grpc::StatusCode code, Clock::time_point now);
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }

  // The outlier state, under the endpoint's lock.
  bool ejected() const;
  bool DueForCheck(Clock::time_point now) const;
  void RecordCheck(bool passed, Clock::time_point now);
  std::chrono::milliseconds back_off() const;

  // Written by the EndpointSet under its lock; read by pickers without it.
  std::atomic<bool> draining{false};
  std::atomic<Clock::rep> eligible_since{0};  // steady_clock ticks; slow start runs from here

 private:
  const std::string address_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  std::atomic<uint64_t> next_stub_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> requests_{0};
  mutable std::mutex mu_;
  OutlierDetector outlier_;  // guarded by mu_
};

// The channel arguments every endpoint connection uses: reconnect quickly, detect a dead peer
// with keepalive pings, and no retries of gRPC's own (the router retries, once, elsewhere).
grpc::ChannelArguments EndpointChannelArguments(int index);

}  // namespace gecd::route

#endif  // GECD_ROUTE_ENDPOINT_H_
