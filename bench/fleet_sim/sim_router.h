#ifndef GECD_BENCH_FLEET_SIM_SIM_ROUTER_H_
#define GECD_BENCH_FLEET_SIM_SIM_ROUTER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "fleet_sim/sim_random.h"

namespace gecd::fleet_sim {

// The pod-picking rules `gecd route` offers, plus uniform random (the baseline p2c improves on)
// and least-request over every pod (what p2c approximates with two looks).
enum class Policy { kRoundRobin, kRandom, kP2C, kLeastRequest };

// "round_robin", "random", "p2c", "least_request" (the names in the CSV).
absl::string_view PolicyName(Policy policy);
absl::StatusOr<Policy> ParsePolicy(absl::string_view name);

// One router: picks the pod for each request from its view of the pods' in-flight counts.
// Owns the round-robin cursor and the random stream of its picks.
class SimRouter {
 public:
  // The round-robin cursor starts at a random pod, so that several routers do not move in step.
  SimRouter(Policy policy, int pods, uint64_t seed);

  // in_flight[i]: the requests this router believes pod i holds (in_flight.size() == pods).
  //  - round robin: the next pod in turn;
  //  - random: any pod, uniformly;
  //  - p2c: two distinct pods drawn uniformly, the one with fewer in flight, a tie by a coin;
  //  - least request: a pod with the fewest in flight, ties uniformly among them.
  int Pick(absl::Span<const int> in_flight);

 private:
  Policy policy_;
  int pods_;
  SimRandom random_;
  int next_;
  std::vector<int> minima_;  // least request's ties, kept to avoid an allocation per pick
};

}  // namespace gecd::fleet_sim

#endif  // GECD_BENCH_FLEET_SIM_SIM_ROUTER_H_
