#include "route/static_source.h"

#include <algorithm>
#include <utility>

namespace gecd::route {

std::vector<DiscoveredEndpoint> ReadyEndpoints(std::vector<std::string> addresses) {
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  std::vector<DiscoveredEndpoint> endpoints;
  endpoints.reserve(addresses.size());
  for (std::string& a : addresses) endpoints.push_back({.address = std::move(a)});
  return endpoints;
}

StaticSource::StaticSource(std::vector<std::string> addresses) : addresses_(std::move(addresses)) {}

absl::Status StaticSource::Start(UpdateCallback on_update) {
  on_update(ReadyEndpoints(addresses_));
  return absl::OkStatus();
}

}  // namespace gecd::route
