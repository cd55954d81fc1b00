#ifndef GECD_ROUTE_ENDPOINT_SLICES_H_
#define GECD_ROUTE_ENDPOINT_SLICES_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "route/endpoint_source.h"

// The Kubernetes source's reading of discovery.k8s.io/v1 EndpointSlices: which addresses of a
// slice the router may use, and the merge of all the slices of one Service into one report.
namespace gecd::route {

// What an endpoint's conditions allow.
enum class EndpointUse {
  kEligible,  // new requests
  kDraining,  // serving and terminating: the calls in flight finish, no new ones
  kRemoved,   // neither
};

// The condition rules (EndpointConditions, nil as the API reference says: ready nil = true,
// serving nil = ready, terminating nil = false). Terminating comes first: a terminating
// endpoint takes no new requests even where ready stays true (publishNotReadyAddresses).
EndpointUse ClassifyConditions(std::optional<bool> ready, std::optional<bool> serving,
                               std::optional<bool> terminating);

// One slice as the source keeps it: its name, its resourceVersion and the endpoints it
// contributes (address "host:port" or "[v6]:port", draining or not).
struct ParsedSlice {
  std::string name;
  std::string resource_version;
  std::string ignored;  // why the slice contributes nothing (e.g. it lacks the port); "" = it does
  std::vector<DiscoveredEndpoint> endpoints;
};

// Reads one EndpointSlice object. `port` is route.kubernetes.port: a port name, or a number
// that matches the port number (TCP ports only). A slice without that port, or of an
// addressType this reading does not know, is not an error but ignored (ParsedSlice::ignored);
// a missing required field or one of the wrong type is, naming the slice and the field.
absl::StatusOr<ParsedSlice> ParseEndpointSlice(const nlohmann::json& slice, absl::string_view port);

// The slices of one Service, by name, merged into one report: every address once, sorted;
// an address that one slice lists as eligible and another as draining is eligible.
class SliceSet {
 public:
  void Upsert(ParsedSlice slice);
  void Erase(const std::string& name);
  void Clear() { slices_.clear(); }
  size_t size() const { return slices_.size(); }
  const std::map<std::string, ParsedSlice>& slices() const { return slices_; }
  std::vector<DiscoveredEndpoint> Merged() const;

 private:
  std::map<std::string, ParsedSlice> slices_;
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_ENDPOINT_SLICES_H_
