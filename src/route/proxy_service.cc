#include "route/proxy_service.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"

namespace gecd::route {
namespace {

constexpr char kCorrectMethod[] = "/gecd.v1.GrammarCorrection/Correct";
constexpr char kCorrectStreamMethod[] = "/gecd.v1.GrammarCorrection/CorrectStream";

using SteadyClock = std::chrono::steady_clock;

// Headers the HTTP/2 and gRPC layers write themselves; copying them would duplicate or
// contradict what the router's own call sends.
bool IsTransportHeader(std::string_view key) {
  return key.empty() || key[0] == ':' || key.starts_with("grpc-") || key == "content-type" ||
         key == "te" || key == "user-agent" || key == "host";
}

void CopyClientMetadata(const grpc::CallbackServerContext& from, grpc::ClientContext& to) {
  for (const auto& [key, value] : from.client_metadata()) {
    const std::string_view k(key.data(), key.size());
    if (!IsTransportHeader(k))
      to.AddMetadata(std::string(k), std::string(value.data(), value.size()));
  }
}

template <typename Add>
void CopyServerMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& from, Add add) {
  for (const auto& [key, value] : from) {
    const std::string_view k(key.data(), key.size());
    if (!IsTransportHeader(k)) add(std::string(k), std::string(value.data(), value.size()));
  }
}

// The context of a call to an endpoint for the client's call: its deadline and metadata.
// Cancellation is passed on by the reactors' OnCancel. (ClientContext::FromCallbackServerContext
// would do both by linking the two calls in gRPC's core, which measured at ~15% of the router's
// CPU per call.)
std::unique_ptr<grpc::ClientContext> EndpointContext(const grpc::CallbackServerContext& from) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(from.deadline());
  CopyClientMetadata(from, *context);
  return context;
}

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

grpc::Status NoEndpoint() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "gecd route: no eligible endpoint (none discovered, all ejected or "
                      "draining); see the router's /metrics gecd_route_endpoints");
}

grpc::Status Overloaded(int64_t max_in_flight) {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("gecd route: ", max_in_flight,
                                   " calls in flight already (route.max_in_flight)"));
}

}  // namespace

// One Correct call: an attempt, and on UNAVAILABLE one more on another endpoint.
class UnaryProxy final : public grpc::ServerUnaryReactor {
 public:
  UnaryProxy(ProxyService& service, grpc::CallbackServerContext* context,
             const grpc::ByteBuffer* request, grpc::ByteBuffer* response)
      : service_(service), context_(context), request_(request), response_(response) {}

  void Attempt(const Endpoint* exclude) {
    endpoint_ = service_.endpoints_.Pick(exclude);
    if (endpoint_ == nullptr) {
      // A retry with nowhere else to go answers what the first attempt got.
      Answer(exclude != nullptr ? first_status_ : NoEndpoint());
      return;
    }
    auto client = EndpointContext(*context_);
    {
      std::lock_guard lock(mu_);
      if (cancelled_) {
        Answer(grpc::Status::CANCELLED);
        return;
      }
      // A cancellation from now on reaches this attempt (TryCancel before the call starts
      // cancels it when it starts). The previous attempt's context is done with.
      client_ = std::move(client);
    }
    attempt_request_ = *request_;     // shares the slices; each attempt sends its own
    if (!attempt_request_.Valid()) {  // defensive: gRPC hands an empty message as a buffer
      grpc::Slice empty("", 0);
      attempt_request_ = grpc::ByteBuffer(&empty, 1);
    }
    endpoint_->CallStarted();
    endpoint_->stub().UnaryCall(client_.get(), kCorrectMethod, grpc::StubOptions(),
                                &attempt_request_, response_,
                                [this](grpc::Status status) { OnAnswer(std::move(status)); });
  }

  void OnCancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    if (client_ != nullptr) client_->TryCancel();
  }

  void OnDone() override {
    service_.Release();
    delete this;
  }

 private:
  void OnAnswer(grpc::Status status) {
    service_.endpoints_.CallEnded(*endpoint_, status.error_code());
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !retried_ &&
        !context_->IsCancelled() && context_->deadline() > std::chrono::system_clock::now()) {
      retried_ = true;
      first_status_ = std::move(status);
      service_.metrics_.Retried();
      Attempt(endpoint_.get());
      return;
    }
    CopyServerMetadata(client_->GetServerInitialMetadata(), [this](std::string k, std::string v) {
      context_->AddInitialMetadata(std::move(k), std::move(v));
    });
    CopyServerMetadata(client_->GetServerTrailingMetadata(), [this](std::string k, std::string v) {
      context_->AddTrailingMetadata(std::move(k), std::move(v));
    });
    Answer(status);
  }

  void Answer(const grpc::Status& status) {
    service_.metrics_.CallFinished(status.error_code(), SecondsSince(start_));
    Finish(status);
  }

  ProxyService& service_;
  grpc::CallbackServerContext* const context_;
  const grpc::ByteBuffer* const request_;
  grpc::ByteBuffer* const response_;
  const SteadyClock::time_point start_ = SteadyClock::now();
  grpc::ByteBuffer attempt_request_;
  std::shared_ptr<Endpoint> endpoint_;
  std::mutex mu_;  // client_ and cancelled_, between the attempts and OnCancel
  std::unique_ptr<grpc::ClientContext> client_;
  bool cancelled_ = false;
  bool retried_ = false;
  grpc::Status first_status_;
};

// One CorrectStream: the client's stream (this reactor) spliced onto one to the endpoint
// (Upstream), a message at a time in each direction. Upstream operations started from the
// client side's reactions are covered by holds, so the upstream call cannot complete under
// them: `writes_hold_` while client messages may still be written upstream, a read hold while
// an answer is being written to the client. The client's call is finished only from the
// upstream's OnDone, so this reactor outlives both calls.
class StreamProxy final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamProxy(ProxyService& service, grpc::CallbackServerContext* context)
      : service_(service), context_(context), upstream_(*this) {}

  // Past the router's cap: the stream ends at once, never counted in.
  void Refuse(const grpc::Status& status) {
    admitted_ = false;
    Answer(status);
  }

  void Open() {
    endpoint_ = service_.endpoints_.Pick();
    if (endpoint_ == nullptr) {
      Answer(NoEndpoint());
      return;
    }
    client_ = EndpointContext(*context_);
    endpoint_->stub().PrepareBidiStreamingCall(client_.get(), kCorrectStreamMethod,
                                               grpc::StubOptions(), &upstream_);
    upstream_.AddHold();  // writes_hold_
    upstream_.StartRead(&from_endpoint_);
    upstream_.StartCall();
    StartRead(&from_client_);
  }

  // A client message, or the client's half-close.
  void OnReadDone(bool ok) override {
    std::unique_lock lock(mu_);
    if (!writes_hold_) return;  // the endpoint's side ended: nothing more goes up
    if (!ok) {
      upstream_.StartWritesDone();
      ReleaseWritesHold(lock);
      return;
    }
    ++outstanding_;
    endpoint_->CallStarted();
    service_.metrics_.StreamMessage(/*to_endpoint=*/true);
    write_in_flight_ = true;
    upstream_.StartWrite(&from_client_);
  }

  // An answer written to the client (the upstream read hold is held).
  void OnWriteDone(bool ok) override {
    if (ok) {
      upstream_.StartRead(&from_endpoint_);
    } else {
      client_->TryCancel();  // the client is gone
    }
    upstream_.RemoveHold();
  }

  void OnCancel() override {
    if (client_ != nullptr) client_->TryCancel();
  }

  void OnDone() override {
    if (admitted_) service_.Release();
    delete this;
  }

 private:
  class Upstream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit Upstream(StreamProxy& proxy) : proxy_(proxy) {}
    void OnReadDone(bool ok) override { proxy_.OnEndpointRead(ok); }
    void OnWriteDone(bool ok) override { proxy_.OnEndpointWriteDone(ok); }
    void OnDone(const grpc::Status& status) override { proxy_.OnEndpointDone(status); }

   private:
    StreamProxy& proxy_;
  };

  void OnEndpointRead(bool ok) {
    std::unique_lock lock(mu_);
    if (!ok) {  // the endpoint finished its side; its status comes in OnDone
      endpoint_reads_over_ = true;
      if (!write_in_flight_) ReleaseWritesHold(lock);
      return;
    }
    if (outstanding_ > 0) {
      --outstanding_;
      service_.endpoints_.CallEnded(*endpoint_, grpc::StatusCode::OK);
    }
    if (!sent_initial_metadata_) {
      sent_initial_metadata_ = true;
      CopyServerMetadata(client_->GetServerInitialMetadata(), [this](std::string k, std::string v) {
        context_->AddInitialMetadata(std::move(k), std::move(v));
      });
    }
    service_.metrics_.StreamMessage(/*to_endpoint=*/false);
    upstream_.AddHold();  // released in OnWriteDone, after the next upstream read starts
    StartWrite(&from_endpoint_);
  }

  void OnEndpointWriteDone(bool ok) {
    std::unique_lock lock(mu_);
    write_in_flight_ = false;
    if (!ok || endpoint_reads_over_) {
      ReleaseWritesHold(lock);
      return;
    }
    StartRead(&from_client_);
  }

  void OnEndpointDone(const grpc::Status& status) {
    {
      std::lock_guard lock(mu_);
      for (; outstanding_ > 0; --outstanding_) {
        service_.endpoints_.CallEnded(*endpoint_, status.error_code());
      }
    }
    CopyServerMetadata(client_->GetServerTrailingMetadata(), [this](std::string k, std::string v) {
      context_->AddTrailingMetadata(std::move(k), std::move(v));
    });
    Answer(status);
  }

  // Drops writes_hold_ once; the upstream call may complete (OnDone) from then on.
  void ReleaseWritesHold(std::unique_lock<std::mutex>& lock) {
    if (!writes_hold_) return;
    writes_hold_ = false;
    lock.unlock();  // RemoveHold may run OnDone on this thread
    upstream_.RemoveHold();
  }

  void Answer(const grpc::Status& status) {
    service_.metrics_.CallFinished(status.error_code(), SecondsSince(start_));
    Finish(status);
  }

  ProxyService& service_;
  grpc::CallbackServerContext* const context_;
  const SteadyClock::time_point start_ = SteadyClock::now();
  bool admitted_ = true;
  std::shared_ptr<Endpoint> endpoint_;
  std::unique_ptr<grpc::ClientContext> client_;
  Upstream upstream_;
  grpc::ByteBuffer from_client_;
  grpc::ByteBuffer from_endpoint_;

  std::mutex mu_;
  bool writes_hold_ = true;  // taken in Open
  bool write_in_flight_ = false;
  bool endpoint_reads_over_ = false;
  bool sent_initial_metadata_ = false;
  int64_t outstanding_ = 0;  // messages sent up and not yet answered
};

ProxyService::ProxyService(EndpointSet& endpoints, RouteMetrics& metrics, int64_t max_in_flight)
    : endpoints_(endpoints), metrics_(metrics), max_in_flight_(max_in_flight) {}

bool ProxyService::Admit() {
  if (in_flight_.fetch_add(1, std::memory_order_relaxed) < max_in_flight_) return true;
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  metrics_.Shed();
  return false;
}

grpc::ServerUnaryReactor* ProxyService::Correct(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  if (!Admit()) {
    metrics_.CallFinished(grpc::StatusCode::RESOURCE_EXHAUSTED, 0);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(Overloaded(max_in_flight_));
    return reactor;
  }
  auto* proxy = new UnaryProxy(*this, context, request, response);
  proxy->Attempt(nullptr);
  return proxy;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ProxyService::CorrectStream(
    grpc::CallbackServerContext* context) {
  auto* proxy = new StreamProxy(*this, context);
  if (!Admit()) {
    proxy->Refuse(Overloaded(max_in_flight_));
    return proxy;
  }
  proxy->Open();
  return proxy;
}

}  // namespace gecd::route
