#ifndef GECD_ROUTE_ROUTER_H_
#define GECD_ROUTE_ROUTER_H_

#include <atomic>
#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "grpcpp/server.h"
#include "route/endpoint_set.h"
#include "route/endpoint_source.h"
#include "route/proxy_service.h"
#include "route/route_metrics.h"
#include "server/health_poller.h"
#include "server/status_http.h"

// `gecd route`, assembled: the endpoint source feeding the EndpointSet, the gRPC server on
// route.listen (the proxy, grpc.health.v1 SERVING while an endpoint is eligible, reflection)
// and the operator endpoint on route.metrics_listen (/metrics, /healthz, /readyz). Owns them
// all; the destructor drains with no grace.
namespace gecd::route {

class Router {
 public:
  static absl::StatusOr<std::unique_ptr<Router>> Start(const config::Config& config);
  ~Router();

  int port() const { return port_; }
  int metrics_port() const { return status_->port(); }
  // Stops taking calls (health NOT_SERVING, /readyz 503) and lets those in flight finish
  // within `grace`; those still running then are cancelled.
  void Drain(std::chrono::milliseconds grace);

 private:
  explicit Router(const config::Config& config);
  bool Ready() const { return !draining_.load() && endpoints_.AnyEligible(); }

  DiscoveryCounters discovery_;
  RouteMetrics metrics_;
  EndpointSet endpoints_;
  ProxyService proxy_;
  std::unique_ptr<EndpointSource> source_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<server::StatusHttpServer> status_;
  int port_ = 0;
  std::unique_ptr<server::HealthPoller> health_;
  std::atomic<bool> draining_{false};
};

// Runs the router until SIGTERM or SIGINT, then drains for route.grace_period_ms. The exit
// code: 0 after a drain, 2 when it could not start (the reason is logged).
int RunRouter(const config::Config& config);

}  // namespace gecd::route

#endif  // GECD_ROUTE_ROUTER_H_
