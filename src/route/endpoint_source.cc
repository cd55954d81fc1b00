#include "route/endpoint_source.h"

#include <chrono>

#include "route/dns_source.h"
#include "route/static_source.h"

namespace gecd::route {

absl::StatusOr<std::unique_ptr<EndpointSource>> CreateEndpointSource(
    const config::RouteSection& route, DiscoveryCounters* counters) {
  if (route.source == "dns") {
    return std::make_unique<DnsSource>(route.dns, std::chrono::seconds(route.dns_refresh_s),
                                       counters);
  }
  if (route.source == "kubernetes") {
    return absl::UnimplementedError("route.endpoints.source: kubernetes is not built in yet");
  }
  return std::make_unique<StaticSource>(route.static_endpoints);
}

}  // namespace gecd::route
