#ifndef GECD_ROUTE_STATIC_SOURCE_H_
#define GECD_ROUTE_STATIC_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "route/endpoint_source.h"

namespace gecd::route {

// route.endpoints.source: static — the configured list, reported once at Start.
class StaticSource final : public EndpointSource {
 public:
  explicit StaticSource(std::vector<std::string> addresses);
  absl::Status Start(UpdateCallback on_update) override;

 private:
  const std::vector<std::string> addresses_;
};

// Addresses as one report: unique, sorted, none draining.
std::vector<DiscoveredEndpoint> ReadyEndpoints(std::vector<std::string> addresses);

}  // namespace gecd::route

#endif  // GECD_ROUTE_STATIC_SOURCE_H_
