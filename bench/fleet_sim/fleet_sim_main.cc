// fleet_sim: sweeps load points × routing policies through the fleet simulation and prints a
// markdown table of p99 / p99.9 (and writes every figure to --csv).

#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "fleet_sim/fleet_sim.h"
#include "fleet_sim/sim_options.h"

namespace gecd::fleet_sim {
namespace {

absl::Status Main(int argc, char** argv) {
  ASSIGN_OR_RETURN(SweepOptions options,
                   ParseSweepOptions(std::vector<std::string>(argv + 1, argv + argc)));
  if (options.help) {
    std::cout << kSweepUsage;
    return absl::OkStatus();
  }
  FleetOptions fleet = options.fleet;
  const PodModel& m = fleet.model;
  const double capacity = FleetCapacity(fleet);
  std::cout << absl::StrFormat(
      "pod model: step %.4f ms + %.5f ms per decoding sequence + %.5f ms per prompt token "
      "(calibration x %.5f); batch <= %d, %d steps and %d prompt tokens per request\n"
      "pod capacity %.1f req/s; %d pods, %d%% of them %gx slower; fleet capacity %.0f req/s; "
      "%d router(s); %lld measured requests per run after %lld, seed %llu\n\n",
      m.step_fixed_s * 1e3, m.decode_token_s * 1e3, m.prompt_token_s * 1e3, options.time_scale,
      m.max_batch, m.steps_per_request, m.prompt_tokens, m.Capacity(), fleet.pods,
      static_cast<int>(fleet.slow_fraction * 100 + 0.5), fleet.slow_factor, capacity, fleet.routers,
      static_cast<long long>(fleet.measured_requests),
      static_cast<long long>(fleet.warmup_requests), static_cast<unsigned long long>(fleet.seed));

  std::vector<std::pair<double, double>> points;  // (utilisation, rate)
  if (!options.rates.empty()) {
    for (double rate : options.rates) points.emplace_back(rate / capacity, rate);
  } else {
    for (double u : options.utilisations) points.emplace_back(u, u * capacity);
  }

  std::ofstream csv;
  if (!options.csv_path.empty()) {
    csv.open(options.csv_path);
    if (!csv) {
      return absl::InvalidArgumentError(absl::StrCat("--csv: cannot write ", options.csv_path));
    }
    csv << "policy,routers,utilisation,rate_rps,measured,mean_ms,p50_ms,p99_ms,p999_ms,max_ms,"
           "slow_share,mean_batch,throughput_rps,unbounded\n";
  }
  std::string header = "| utilisation | req/s |";
  std::string rule = "| ---: | ---: |";
  for (Policy policy : options.policies) {
    absl::StrAppend(&header, " ", PolicyName(policy), " p99 / p99.9 ms |");
    absl::StrAppend(&rule, " ---: |");
  }
  std::cout << header << "\n" << rule << "\n";
  bool any_unbounded = false;
  for (const auto& [utilisation, rate] : points) {
    std::string row = absl::StrFormat("| %.0f%% | %.0f |", utilisation * 100, rate);
    for (Policy policy : options.policies) {
      fleet.policy = policy;
      fleet.rate_rps = rate;
      ASSIGN_OR_RETURN(FleetResult r, RunFleet(fleet));
      const bool unbounded = OverloadsSlowestPod(fleet);
      any_unbounded |= unbounded;
      absl::StrAppendFormat(&row, " %.1f / %.1f%s |", r.p99_s * 1e3, r.p999_s * 1e3,
                            unbounded ? " †" : "");
      if (csv.is_open()) {
        csv << absl::StrFormat("%s,%d,%.4f,%.1f,%lld,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%.2f,%.1f,%d\n",
                               PolicyName(policy), fleet.routers, utilisation, rate,
                               static_cast<long long>(r.measured), r.mean_s * 1e3, r.p50_s * 1e3,
                               r.p99_s * 1e3, r.p999_s * 1e3, r.max_s * 1e3, r.slow_share,
                               r.mean_batch, r.throughput_rps, unbounded);
      }
    }
    std::cout << row << std::endl;
  }
  if (any_unbounded) {
    std::cout << "\n† the policy gives every pod the same share, which is more than a slow pod "
                 "serves: its queue grows for as long as the load lasts (no steady state; the "
                 "figure grows with the run's length)\n";
  }
  if (csv.is_open()) {
    csv.close();
    if (!csv) {
      return absl::InternalError(absl::StrCat("--csv: writing ", options.csv_path, " failed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace gecd::fleet_sim

int main(int argc, char** argv) {
  const absl::Status status = gecd::fleet_sim::Main(argc, argv);
  if (status.ok()) return 0;
  std::cerr << "fleet_sim: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}
