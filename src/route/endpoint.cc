#include "route/endpoint.h"

#include <utility>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gecd::route {

Endpoint::Endpoint(std::string address, OutlierDetector::Options ejection,
                   const tls::UpstreamTls* tls)
    : address_(std::move(address)), tls_(tls), outlier_(ejection) {}

const std::shared_ptr<grpc::Channel>& Endpoint::channel() {
  std::call_once(channel_once_, [this] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    if (tls_ != nullptr) tls_->AddChannelArguments(args);
    channel_ = grpc::CreateCustomChannel(
        address_, tls_ != nullptr ? tls_->credentials() : grpc::InsecureChannelCredentials(), args);
  });
  return channel_;
}

bool Endpoint::CallEnded(grpc::StatusCode code, Clock::time_point now) {
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  // A call the client cancelled or let expire says nothing about the endpoint.
  if (code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return false;
  }
  MutexLock lock(&mu_);
  if (code != grpc::StatusCode::UNAVAILABLE) {
    outlier_.RecordSuccess();
    return false;
  }
  return outlier_.RecordFailure(now);
}

bool Endpoint::ejected() const {
  MutexLock lock(&mu_);
  return outlier_.ejected();
}

bool Endpoint::DueForCheck(Clock::time_point now) const {
  MutexLock lock(&mu_);
  return outlier_.DueForCheck(now);
}

void Endpoint::RecordCheck(bool passed, Clock::time_point now) {
  MutexLock lock(&mu_);
  outlier_.RecordCheck(passed, now);
}

std::chrono::milliseconds Endpoint::back_off() const {
  MutexLock lock(&mu_);
  return outlier_.back_off();
}

}  // namespace gecd::route
