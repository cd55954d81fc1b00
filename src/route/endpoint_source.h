#ifndef GECD_ROUTE_ENDPOINT_SOURCE_H_
#define GECD_ROUTE_ENDPOINT_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/config.h"

// Endpoint discovery for `gecd route` (route.endpoints.source): something that learns which
// daemons exist and reports the whole set each time it changes. The router's EndpointSet turns
// those reports into channels, states and the picker's candidates.
namespace gecd::route {

// One address discovery reported.
struct DiscoveredEndpoint {
  std::string address;    // "host:port" or "[v6]:port", as gRPC dials it
  bool draining = false;  // serving but terminating: calls in flight finish, no new ones
  bool operator==(const DiscoveredEndpoint&) const = default;
};

// Discovery's own health, for /metrics (gecd_route_discovery_*). Sources bump them; the router
// reads them. Relaxed atomics: they are counters only.
struct DiscoveryCounters {
  std::atomic<uint64_t> updates{0};         // sets reported
  std::atomic<uint64_t> relists{0};         // full lists after the first (410 Gone, errors)
  std::atomic<uint64_t> watch_restarts{0};  // watches re-opened (dropped, ended, timed out)
  std::atomic<uint64_t> errors{0};          // failed requests, bad answers, malformed events
};

// Owns a discovery mechanism and the thread(s) it runs on. Reports go to `on_update`, one at a
// time, each the complete current set (addresses unique, sorted). The destructor stops and
// joins; no report is made after it returns.
class EndpointSource {
 public:
  using UpdateCallback = std::function<void(std::vector<DiscoveredEndpoint>)>;

  virtual ~EndpointSource() = default;
  // Begins discovery. An error here (e.g. an unreadable kubeconfig) is a start-up error;
  // errors later are logged, counted and retried with back-off, keeping the last set.
  virtual absl::Status Start(UpdateCallback on_update) = 0;
};

// The source route.endpoints.source names, configured but not started. Bad settings (e.g. a
// malformed kubeconfig) are errors naming the key.
absl::StatusOr<std::unique_ptr<EndpointSource>> CreateEndpointSource(
    const config::RouteSection& route, DiscoveryCounters* counters);

}  // namespace gecd::route

#endif  // GECD_ROUTE_ENDPOINT_SOURCE_H_
