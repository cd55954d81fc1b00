#ifndef GECD_BENCH_FLEET_SIM_SIM_ROUTER_H_
#define GECD_BENCH_FLEET_SIM_SIM_ROUTER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "fleet_sim/sim_random.h"
#include "route_picker/picker.h"

namespace gecd::fleet_sim {

// The pod-picking rules `gecd route` offers (route::Picker's), plus uniform random (the baseline
// p2c improves on, which the router does not ship).
enum class Policy { kRoundRobin, kRandom, kP2C, kLeastRequest };

// "round_robin", "random", "p2c", "least_request" (the names in the CSV).
absl::string_view PolicyName(Policy policy);
absl::StatusOr<Policy> ParsePolicy(absl::string_view name);

// One router: picks the pod for each request from its view of the pods' in-flight counts.
// Owns the random stream of its picks and, for every policy but random, the router's own
// route::Picker, which draws from that stream so that a run depends only on its seed.
class SimRouter {
 public:
  SimRouter(Policy policy, int pods, uint64_t seed);

  // in_flight[i]: the requests this router believes pod i holds (in_flight.size() == pods).
  //  - random: any pod, uniformly;
  //  - the others: route::Picker's decision, with every pod at weight 1 (no slow start).
  int Pick(absl::Span<const int> in_flight);

 private:
  int pods_;
  SimRandom random_;
  std::unique_ptr<route::Picker> picker_;  // null for random
};

}  // namespace gecd::fleet_sim

#endif  // GECD_BENCH_FLEET_SIM_SIM_ROUTER_H_
