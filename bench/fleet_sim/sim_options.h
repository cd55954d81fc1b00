#ifndef GECD_BENCH_FLEET_SIM_SIM_OPTIONS_H_
#define GECD_BENCH_FLEET_SIM_SIM_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fleet_sim/fleet_sim.h"

namespace gecd::fleet_sim {

// What fleet_sim's command line asks for: one run per (load point, policy), every run with the
// options of `fleet` but its policy and rate.
struct SweepOptions {
  FleetOptions fleet;  // its model already scaled to pod_capacity
  std::vector<Policy> policies;
  // Load points as a share of FleetCapacity(fleet), or (when rates is not empty) in req/s.
  std::vector<double> utilisations;
  std::vector<double> rates;
  // The capacity a normal pod is scaled to (req/s); 0 keeps the CPU calibration's own.
  double pod_capacity = 1050;
  // The factor every step time of the calibration was multiplied by.
  double time_scale = 1;
  std::string csv_path;
  bool help = false;
};

extern const char kSweepUsage[];

// argv without the program name. A bad value is an error naming its flag.
absl::StatusOr<SweepOptions> ParseSweepOptions(const std::vector<std::string>& args);

}  // namespace gecd::fleet_sim

#endif  // GECD_BENCH_FLEET_SIM_SIM_OPTIONS_H_
