#include "fleet_sim/sim_options.h"

#include <climits>
#include <cmath>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/args.h"
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

// Sets *field from flag `name` when it is given: a number >= min, times `scale`.
absl::Status SetNumber(const Args& args, std::string_view name, double min, double* field,
                       double scale = 1) {
  const std::optional<std::string> v = args.Get(name);
  if (!v) return absl::OkStatus();
  ASSIGN_OR_RETURN(*field, ParseNumber(absl::StrCat("--", std::string(name)), *v, min));
  *field *= scale;
  return absl::OkStatus();
}

// Sets *field from flag `name` when it is given: an integer in [min, max].
template <typename T>
absl::Status SetInteger(const Args& args, std::string_view name, int64_t min, T* field,
                        int64_t max = INT_MAX) {
  const std::optional<std::string> v = args.Get(name);
  if (!v) return absl::OkStatus();
  ASSIGN_OR_RETURN(*field, ParseInteger(absl::StrCat("--", std::string(name)), *v, min, max));
  return absl::OkStatus();
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

absl::StatusOr<SweepOptions> ParseSweepOptions(const std::vector<std::string>& argv) {
  SweepOptions options;
  FleetOptions& fleet = options.fleet;
  PodModel& model = fleet.model;
  model = CpuCalibratedPodModel();
  options.policies = {Policy::kRoundRobin, Policy::kRandom, Policy::kP2C, Policy::kLeastRequest};
  options.utilisations = {0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98};
  static const std::vector<FlagSpec> kFlags = {{"help", false, ""},
                                               {"policies", true, ""},
                                               {"utilisation", true, ""},
                                               {"rates", true, ""},
                                               {"pods", true, ""},
                                               {"slow-fraction", true, ""},
                                               {"slow-factor", true, ""},
                                               {"routers", true, ""},
                                               {"pod-capacity", true, ""},
                                               {"requests", true, ""},
                                               {"warmup", true, ""},
                                               {"seed", true, ""},
                                               {"csv", true, ""},
                                               {"step-ms", true, ""},
                                               {"decode-token-ms", true, ""},
                                               {"prompt-token-ms", true, ""},
                                               {"max-batch", true, ""},
                                               {"max-step-tokens", true, ""},
                                               {"steps", true, ""},
                                               {"prompt-tokens", true, ""}};
  bool help = false;
  ASSIGN_OR_RETURN(const Args args, ParseToolArgs(argv, kFlags, &help));
  options.help = help;
  if (auto v = args.Get("policies")) {
    options.policies.clear();
    for (absl::string_view name : absl::StrSplit(*v, ',')) {
      absl::StatusOr<Policy> policy = ParsePolicy(name);
      if (!policy.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--policies: ", policy.status().message()));
      }
      options.policies.push_back(*policy);
    }
  }
  if (args.Has("utilisation") && args.Has("rates")) {
    return absl::InvalidArgumentError(
        "--utilisation and --rates exclude each other: load points are one or the other");
  }
  if (auto v = args.Get("utilisation")) {
    ASSIGN_OR_RETURN(options.utilisations, ParseNumbers("--utilisation", *v));
  }
  if (auto v = args.Get("rates")) {
    ASSIGN_OR_RETURN(options.rates, ParseNumbers("--rates", *v));
  }
  RETURN_IF_ERROR(SetInteger(args, "pods", 1, &fleet.pods));
  RETURN_IF_ERROR(SetNumber(args, "slow-fraction", 0, &fleet.slow_fraction));
  if (fleet.slow_fraction > 1) {
    return BadValue("--slow-fraction", *args.Get("slow-fraction"), "a share in [0, 1]");
  }
  RETURN_IF_ERROR(SetNumber(args, "slow-factor", 1, &fleet.slow_factor));
  RETURN_IF_ERROR(SetInteger(args, "routers", 1, &fleet.routers));
  RETURN_IF_ERROR(SetNumber(args, "pod-capacity", 0, &options.pod_capacity));
  // The latencies are kept for exact percentiles: 8 bytes each.
  RETURN_IF_ERROR(SetInteger(args, "requests", 1, &fleet.measured_requests, 100'000'000));
  RETURN_IF_ERROR(SetInteger(args, "warmup", 0, &fleet.warmup_requests, 1'000'000'000));
  int64_t seed = -1;
  RETURN_IF_ERROR(SetInteger(args, "seed", 0, &seed, INT64_MAX));
  if (seed >= 0) fleet.seed = static_cast<uint64_t>(seed);
  if (auto v = args.Get("csv")) options.csv_path = *v;
  RETURN_IF_ERROR(SetNumber(args, "step-ms", 0, &model.step_fixed_s, 1e-3));
  RETURN_IF_ERROR(SetNumber(args, "decode-token-ms", 0, &model.decode_token_s, 1e-3));
  RETURN_IF_ERROR(SetNumber(args, "prompt-token-ms", 0, &model.prompt_token_s, 1e-3));
  RETURN_IF_ERROR(SetInteger(args, "max-batch", 1, &model.max_batch));
  RETURN_IF_ERROR(SetInteger(args, "max-step-tokens", 1, &model.max_step_tokens));
  RETURN_IF_ERROR(SetInteger(args, "steps", 1, &model.steps_per_request));
  RETURN_IF_ERROR(SetInteger(args, "prompt-tokens", 1, &model.prompt_tokens));
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
