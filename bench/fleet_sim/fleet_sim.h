#ifndef GECD_BENCH_FLEET_SIM_FLEET_SIM_H_
#define GECD_BENCH_FLEET_SIM_FLEET_SIM_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "fleet_sim/sim_pod.h"
#include "fleet_sim/sim_router.h"

namespace gecd::fleet_sim {

// One simulated run: a fleet of pods behind `routers` routers, Poisson arrivals at rate_rps.
struct FleetOptions {
  int pods = 200;
  // round(pods * slow_fraction) pods, chosen at random from the seed, run every step
  // slow_factor times slower.
  double slow_fraction = 0.05;
  double slow_factor = 2;
  PodModel model;
  Policy policy = Policy::kP2C;
  // Each request goes to one router drawn uniformly. A router sees only the requests it sent
  // itself (its own in-flight count per pod, exact and instant); with one router that is the
  // fleet's true count.
  int routers = 1;
  double rate_rps = 0;
  // The first warmup_requests arrivals are not measured; the next measured_requests are, and
  // the run lasts until the last of them has finished.
  int64_t warmup_requests = 20'000;
  int64_t measured_requests = 200'000;
  uint64_t seed = 1;

  // Every field in range (the error names it), the model's included.
  absl::Status Validate() const;
};

// End-to-end latency (arrival at the router to the last token) of the measured requests.
struct FleetResult {
  int64_t measured = 0;
  double mean_s = 0;
  double p50_s = 0;
  double p99_s = 0;
  double p999_s = 0;
  double max_s = 0;
  // Of the measured requests, the share sent to a slow pod.
  double slow_share = 0;
  // Sequences per engine step, over every pod and step of the run.
  double mean_batch = 0;
  // Measured requests finished per second, between the first and the last of them to finish.
  double throughput_rps = 0;
};

// Requests per second the fleet serves with every pod at a full batch.
double FleetCapacity(const FleetOptions& options);

// True when the policy gives every pod the same share of the requests whatever its state
// (round robin, random) and that share, rate_rps / pods, exceeds the slowest pod's capacity:
// that pod's queue then grows for as long as the load lasts, so its latency has no steady state
// and a run's figures grow with the run's length.
bool OverloadsSlowestPod(const FleetOptions& options);

// Runs the simulation; the same options (seed included) give the same result.
absl::StatusOr<FleetResult> RunFleet(const FleetOptions& options);

}  // namespace gecd::fleet_sim

#endif  // GECD_BENCH_FLEET_SIM_FLEET_SIM_H_
