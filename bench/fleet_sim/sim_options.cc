#include "fleet_sim/sim_options.h"

#include <climits>
#include <cmath>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/flag_scan.h"
#include "common/status_macros.h"

namespace gecd::fleet_sim {

const char kSweepUsage[] = R"(usage: fleet_sim [options]

Discrete-event simulation of a fleet of gecd pods (continuous-batching engines) behind a
router: Poisson arrivals, one run per load point and policy, end-to-end latency percentiles
(docs/ROUTING.md, "Fleet-scale simulation"). Writes a table to stdout and rows to --csv.

  --policies LIST        round_robin,random,p2c,least_request (all four)
  --utilisation LIST     load points as shares of the fleet's capacity
                         (0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.95,0.98)
  --rates LIST           load points in requests/s instead
  --pods N               pods (200)
  --slow-fraction F      share of the pods that are slow (0.05)
  --slow-factor F        how many times slower their steps are (2)
  --routers N            routers, each seeing only its own in-flight counts (1)
  --pod-capacity R       scale the calibrated step times so a normal pod serves R req/s at a
                         full batch (1050); 0 keeps the CPU calibration (≈ 47 req/s)
  --requests N           measured requests per run (200000)
  --warmup N             arrivals before those, not measured (20000)
  --seed N               seed of every random stream (1)
  --csv FILE             write one row per run
  --step-ms X            the calibration's fixed cost per step (2.318)
  --decode-token-ms X    its cost per decoding sequence (0.2368)
  --prompt-token-ms X    its cost per prompt token prefilled (0.173)
  --max-batch N          sequences per step (128)
  --max-step-tokens N    tokens per step (2048)
  --steps N              steps per request: the prefill step and the decodes (50)
  --prompt-tokens N      prompt tokens per request (50)
  --help                 this text
)";

namespace {

absl::Status BadValue(absl::string_view flag, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": '", value, "' is not ", want));
}

absl::StatusOr<double> ParseNumber(absl::string_view flag, absl::string_view value, double min) {
  double v;
  if (!absl::SimpleAtod(value, &v) || !(v >= min) || !std::isfinite(v)) {
    return BadValue(flag, value, absl::StrCat("a number >= ", min));
  }
  return v;
}

absl::StatusOr<int64_t> ParseInteger(absl::string_view flag, absl::string_view value, int64_t min,
                                     int64_t max = INT_MAX) {
  int64_t v;
  if (!absl::SimpleAtoi(value, &v) || v < min || v > max) {
    return BadValue(flag, value, absl::StrCat("an integer in [", min, ", ", max, "]"));
  }
  return v;
}

absl::StatusOr<std::vector<double>> ParseNumbers(absl::string_view flag, absl::string_view value) {
  std::vector<double> numbers;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    double v;
    if (!absl::SimpleAtod(item, &v) || !(v > 0) || !std::isfinite(v)) {
      return BadValue(flag, item, "a number > 0");
    }
    numbers.push_back(v);
  }
  return numbers;
}

}  // namespace

absl::StatusOr<SweepOptions> ParseSweepOptions(const std::vector<std::string>& args) {
  SweepOptions options;
  FleetOptions& fleet = options.fleet;
  PodModel& model = fleet.model;
  model = CpuCalibratedPodModel();
  options.policies = {Policy::kRoundRobin, Policy::kRandom, Policy::kP2C, Policy::kLeastRequest};
  options.utilisations = {0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98};
  for (size_t i = 0; i < args.size(); ++i) {
    const CommandLineFlag parsed = SplitFlag(args[i]);
    const std::string& flag = parsed.name;
    if (flag == "--help" || flag == "-h") {
      options.help = true;
      continue;
    }
    ASSIGN_OR_RETURN(const std::string value, FlagValue(parsed, args, i));
    if (flag == "--policies") {
      options.policies.clear();
      for (absl::string_view name : absl::StrSplit(value, ',')) {
        absl::StatusOr<Policy> policy = ParsePolicy(name);
        if (!policy.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(flag, ": ", policy.status().message()));
        }
        options.policies.push_back(*policy);
      }
    } else if (flag == "--utilisation") {
      ASSIGN_OR_RETURN(options.utilisations, ParseNumbers(flag, value));
      options.rates.clear();
    } else if (flag == "--rates") {
      ASSIGN_OR_RETURN(options.rates, ParseNumbers(flag, value));
    } else if (flag == "--pods") {
      ASSIGN_OR_RETURN(fleet.pods, ParseInteger(flag, value, 1));
    } else if (flag == "--slow-fraction") {
      ASSIGN_OR_RETURN(fleet.slow_fraction, ParseNumber(flag, value, 0));
      if (fleet.slow_fraction > 1) return BadValue(flag, value, "a share in [0, 1]");
    } else if (flag == "--slow-factor") {
      ASSIGN_OR_RETURN(fleet.slow_factor, ParseNumber(flag, value, 1));
    } else if (flag == "--routers") {
      ASSIGN_OR_RETURN(fleet.routers, ParseInteger(flag, value, 1));
    } else if (flag == "--pod-capacity") {
      ASSIGN_OR_RETURN(options.pod_capacity, ParseNumber(flag, value, 0));
    } else if (flag == "--requests") {
      // The latencies are kept for exact percentiles: 8 bytes each.
      ASSIGN_OR_RETURN(fleet.measured_requests, ParseInteger(flag, value, 1, 100'000'000));
    } else if (flag == "--warmup") {
      ASSIGN_OR_RETURN(fleet.warmup_requests, ParseInteger(flag, value, 0, 1'000'000'000));
    } else if (flag == "--seed") {
      int64_t seed;
      ASSIGN_OR_RETURN(seed, ParseInteger(flag, value, 0, INT64_MAX));
      fleet.seed = static_cast<uint64_t>(seed);
    } else if (flag == "--csv") {
      options.csv_path = value;
    } else if (flag == "--step-ms") {
      ASSIGN_OR_RETURN(model.step_fixed_s, ParseNumber(flag, value, 0));
      model.step_fixed_s *= 1e-3;
    } else if (flag == "--decode-token-ms") {
      ASSIGN_OR_RETURN(model.decode_token_s, ParseNumber(flag, value, 0));
      model.decode_token_s *= 1e-3;
    } else if (flag == "--prompt-token-ms") {
      ASSIGN_OR_RETURN(model.prompt_token_s, ParseNumber(flag, value, 0));
      model.prompt_token_s *= 1e-3;
    } else if (flag == "--max-batch") {
      ASSIGN_OR_RETURN(model.max_batch, ParseInteger(flag, value, 1));
    } else if (flag == "--max-step-tokens") {
      ASSIGN_OR_RETURN(model.max_step_tokens, ParseInteger(flag, value, 1));
    } else if (flag == "--steps") {
      ASSIGN_OR_RETURN(model.steps_per_request, ParseInteger(flag, value, 1));
    } else if (flag == "--prompt-tokens") {
      ASSIGN_OR_RETURN(model.prompt_tokens, ParseInteger(flag, value, 1));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag, " (see --help)"));
    }
  }
  // A model that is wrong before scaling is reported as written, not as scaled.
  RETURN_IF_ERROR(model.Validate());
  FleetOptions check = fleet;
  check.rate_rps = 1;  // each load point's rate is checked by RunFleet
  RETURN_IF_ERROR(check.Validate());
  if (options.pod_capacity > 0) {
    options.time_scale = model.Capacity() / options.pod_capacity;
    model = model.Scaled(options.time_scale);
  }
  return options;
}

}  // namespace gecd::fleet_sim
