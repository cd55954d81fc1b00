#ifndef GECD_ROUTE_ROUTER_H_
#define GECD_ROUTE_ROUTER_H_

#include <atomic>
#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "auth/token_table.h"
#include "config/config.h"
#include "daemon/health_poller.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "grpcpp/server.h"
#include "route/endpoint_set.h"
#include "route/endpoint_source.h"
#include "route/relay.h"
#include "route/route_metrics.h"
#include "tls/listener_tls.h"
#include "tls/metrics_server.h"
#include "tls/upstream_tls.h"

// `gecd route`, assembled: the endpoint source feeding the EndpointSet, the relay on
// route.listen (TLS with the tls section, TLS to the endpoints with route.upstream_tls, both
// following their files as they rotate), the router's own gRPC server on loopback behind it
// (grpc.health.v1 SERVING while an endpoint is eligible, reflection), and the operator endpoint on
// route.metrics_listen
// (/metrics, /healthz, /readyz). Owns them all; the destructor drains with no grace.
namespace gecd::route {

class Router {
 public:
  static absl::StatusOr<std::unique_ptr<Router>> Start(const config::Config& config);
  ~Router();

  int port() const { return relay_->port(); }
  int metrics_port() const { return status_->port(); }
  // Stops taking calls: health NOT_SERVING, /readyz 503, and new calls answered UNAVAILABLE
  // (which clients retry elsewhere) until none came for route.drain_quiet_ms and those in
  // flight finished, or `grace` is over; whatever still runs then is cut off.
  void Drain(std::chrono::milliseconds grace);

 private:
  Router(const config::Config& config, std::unique_ptr<tls::UpstreamTls> upstream_tls);
  bool Ready() const { return !draining_.load() && endpoints_.AnyEligible(); }

  const std::chrono::milliseconds drain_quiet_;
  std::unique_ptr<auth::TokenTable> tokens_;  // null without auth.tokens_file; outlives relay_
  // Null without the tls section / route.upstream_tls; both outlive relay_ and endpoints_.
  std::unique_ptr<tls::ListenerTls> listener_tls_;
  const std::unique_ptr<tls::UpstreamTls> upstream_tls_;
  DiscoveryCounters discovery_;
  RouteMetrics metrics_;
  EndpointSet endpoints_;
  std::unique_ptr<EndpointSource> source_;
  // Only so reflection lists gecd.v1.GrammarCorrection: the relay answers its calls.
  v1::GrammarCorrection::CallbackService listed_;
  std::unique_ptr<grpc::Server> server_;  // health and reflection, on loopback
  std::unique_ptr<Relay> relay_;
  std::unique_ptr<tls::MetricsServer> status_;  // route.metrics_listen (metrics_tls)
  std::unique_ptr<daemon::HealthPoller> health_;
  std::atomic<bool> draining_{false};
};

// Runs the router until SIGTERM or SIGINT, then drains for route.grace_period_ms. The exit
// code: 0 after a drain, 2 when it could not start (the reason is logged).
int RunRouter(const config::Config& config);

}  // namespace gecd::route

#endif  // GECD_ROUTE_ROUTER_H_
