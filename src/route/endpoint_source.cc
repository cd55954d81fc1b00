#include "route/endpoint_source.h"

#include <chrono>

#include "common/status_macros.h"
#include "daemon/listen_address.h"
#include "route/dns_source.h"
#include "route/kubernetes_source.h"
#include "route/static_source.h"

namespace gecd::route {

absl::StatusOr<std::unique_ptr<EndpointSource>> CreateEndpointSource(
    const config::RouteSection& route, DiscoveryCounters* counters) {
  if (route.source == "dns") {
    ASSIGN_OR_RETURN(const daemon::ListenAddress name,
                     daemon::ParseListenAddress(route.dns, "route.endpoints.dns"));
    return std::make_unique<DnsSource>(name.host, name.port,
                                       std::chrono::seconds(route.dns_refresh_s), counters);
  }
  if (route.source == "kubernetes") return CreateKubernetesSource(route.kubernetes, counters);
  return std::make_unique<StaticSource>(route.static_endpoints);
}

}  // namespace gecd::route
