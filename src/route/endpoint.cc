#include "route/endpoint.h"

#include <utility>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace gecd::route {

grpc::ChannelArguments EndpointChannelArguments(int index) {
  grpc::ChannelArguments args;
  // Distinct arguments keep gRPC from sharing one subchannel (one TCP connection) between the
  // channels of an endpoint.
  args.SetInt("gecd.route.channel", index);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return args;
}

Endpoint::Endpoint(std::string address, int channels, OutlierDetector::Options ejection)
    : address_(std::move(address)), outlier_(ejection) {
  for (int i = 0; i < channels; ++i) {
    channels_.push_back(grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(),
                                                  EndpointChannelArguments(i)));
    stubs_.push_back(std::make_unique<grpc::GenericStub>(channels_.back()));
  }
}

grpc::GenericStub& Endpoint::stub() {
  if (stubs_.size() == 1) return *stubs_.front();
  return *stubs_[next_stub_.fetch_add(1, std::memory_order_relaxed) % stubs_.size()];
}

bool Endpoint::CallEnded(grpc::StatusCode code, Clock::time_point now) {
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  // A call the client cancelled or let expire says nothing about the endpoint.
  if (code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return false;
  }
  std::lock_guard lock(mu_);
  if (code != grpc::StatusCode::UNAVAILABLE) {
    outlier_.RecordSuccess();
    return false;
  }
  return outlier_.RecordFailure(now);
}

bool Endpoint::ejected() const {
  std::lock_guard lock(mu_);
  return outlier_.ejected();
}

bool Endpoint::DueForCheck(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  return outlier_.DueForCheck(now);
}

void Endpoint::RecordCheck(bool passed, Clock::time_point now) {
  std::lock_guard lock(mu_);
  outlier_.RecordCheck(passed, now);
}

std::chrono::milliseconds Endpoint::back_off() const {
  std::lock_guard lock(mu_);
  return outlier_.back_off();
}

}  // namespace gecd::route
