#ifndef GECD_ROUTE_PROXY_SERVICE_H_
#define GECD_ROUTE_PROXY_SERVICE_H_

#include <atomic>
#include <cstdint>

#include "gecd/v1/grammar.grpc.pb.h"
#include "route/endpoint_set.h"
#include "route/route_metrics.h"

// gecd.v1.GrammarCorrection as `gecd route` serves it: every call goes, as raw bytes (never
// parsed), to an endpoint the EndpointSet picks. Deadlines and cancellation propagate to the
// endpoint's call; client metadata goes with it, and the endpoint's metadata, status code and
// message come back unchanged.
//  - Correct: a call answered UNAVAILABLE (a draining pod, a refused connection, an engine
//    restart) is sent once more, to a different endpoint, while the deadline allows; no other
//    code is retried.
//  - CorrectStream: pinned to the endpoint picked when it opens; each message counts as a
//    call in flight there until its answer comes back.
// The router's own cap (max_in_flight) answers RESOURCE_EXHAUSTED; no eligible endpoint
// answers UNAVAILABLE saying so. Owns nothing but counters: the reactors of the calls in flight
// delete themselves when done.
namespace gecd::route {

using ProxyServiceBase = v1::GrammarCorrection::WithRawCallbackMethod_Correct<
    v1::GrammarCorrection::WithRawCallbackMethod_CorrectStream<v1::GrammarCorrection::Service>>;

class ProxyService final : public ProxyServiceBase {
 public:
  ProxyService(EndpointSet& endpoints, RouteMetrics& metrics, int64_t max_in_flight);

  grpc::ServerUnaryReactor* Correct(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* CorrectStream(
      grpc::CallbackServerContext* context) override;

  // Calls (unary, or whole streams) in the router now.
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

 private:
  friend class UnaryProxy;
  friend class StreamProxy;

  // Counts the call in, or false (and counted out again) past max_in_flight.
  bool Admit();
  void Release() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }

  EndpointSet& endpoints_;
  RouteMetrics& metrics_;
  const int64_t max_in_flight_;
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_PROXY_SERVICE_H_
