#include "fleet_sim/fleet_sim.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gecd::fleet_sim {

namespace {

// The random streams of a run (StreamSeed), one per purpose.
enum Stream : uint64_t { kArrivals = 1, kRouterChoice = 2, kSlowPods = 3, kRouters = 100 };

int SlowPods(const FleetOptions& options) {
  return static_cast<int>(std::lround(options.pods * options.slow_fraction));
}

// Which pods are slow: a seeded partial Fisher-Yates shuffle.
std::vector<bool> ChooseSlowPods(const FleetOptions& options) {
  std::vector<int> order(options.pods);
  std::iota(order.begin(), order.end(), 0);
  SimRandom random(StreamSeed(options.seed, kSlowPods));
  std::vector<bool> slow(options.pods, false);
  for (int i = 0; i < SlowPods(options); ++i) {
    std::swap(order[i], order[i + random.Below(options.pods - i)]);
    slow[order[i]] = true;
  }
  return slow;
}

// Nearest-rank percentile of sorted values.
double Percentile(const std::vector<double>& sorted, double p) {
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace

absl::Status FleetOptions::Validate() const {
  RETURN_IF_ERROR(model.Validate());
  auto bad = [](const char* field, double value, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", value, ", want ", want));
  };
  // The bounds keep the routers' views (routers x pods counts) to a few hundred MB at most.
  if (pods < 1 || pods > 100'000) return bad("pods", pods, "in [1, 100000]");
  if (!(slow_fraction >= 0 && slow_fraction <= 1)) {
    return bad("slow_fraction", slow_fraction, "in [0, 1]");
  }
  if (!(slow_factor >= 1) || !std::isfinite(slow_factor)) {
    return bad("slow_factor", slow_factor, ">= 1");
  }
  if (routers < 1 || routers > 1'000) return bad("routers", routers, "in [1, 1000]");
  if (!(rate_rps > 0) || !std::isfinite(rate_rps)) return bad("rate_rps", rate_rps, "> 0");
  if (warmup_requests < 0) return bad("warmup_requests", warmup_requests, ">= 0");
  if (measured_requests < 1) return bad("measured_requests", measured_requests, ">= 1");
  return absl::OkStatus();
}

double FleetCapacity(const FleetOptions& options) {
  const int slow = SlowPods(options);
  return options.model.Capacity() * ((options.pods - slow) + slow / options.slow_factor);
}

bool OverloadsSlowestPod(const FleetOptions& options) {
  if (options.policy != Policy::kRoundRobin && options.policy != Policy::kRandom) return false;
  const double slowest = SlowPods(options) > 0 ? options.slow_factor : 1.0;
  return options.rate_rps / options.pods > options.model.Capacity() / slowest;
}

absl::StatusOr<FleetResult> RunFleet(const FleetOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  const std::vector<bool> slow = ChooseSlowPods(options);
  std::vector<SimPod> pods;
  pods.reserve(options.pods);
  for (int i = 0; i < options.pods; ++i) {
    pods.emplace_back(options.model, slow[i] ? options.slow_factor : 1.0);
  }
  std::vector<SimRouter> routers;
  // views[r][i]: the requests router r sent to pod i that have not finished.
  std::vector<std::vector<int>> views(options.routers, std::vector<int>(options.pods, 0));
  for (int r = 0; r < options.routers; ++r) {
    routers.emplace_back(options.policy, options.pods, StreamSeed(options.seed, kRouters + r));
  }
  SimRandom arrivals(StreamSeed(options.seed, kArrivals));
  SimRandom router_choice(StreamSeed(options.seed, kRouterChoice));

  // The busy pods by the end of their step in progress: each has exactly one entry, and a step's
  // end never moves once it has started, so the heap needs no invalidation.
  using StepEnd = std::pair<double, int>;
  std::priority_queue<StepEnd, std::vector<StepEnd>, std::greater<StepEnd>> step_ends;

  const int64_t total = options.warmup_requests + options.measured_requests;
  std::vector<double> latencies;
  latencies.reserve(options.measured_requests);
  double first_done = 0;
  double last_done = 0;
  int64_t to_slow = 0;
  int64_t sent = 0;
  double next_arrival = arrivals.Exponential(options.rate_rps);
  std::vector<SimRequest> done;
  while (true) {
    const bool arrival =
        sent < total && (step_ends.empty() || next_arrival < step_ends.top().first);
    if (arrival) {
      const int r =
          options.routers == 1 ? 0 : static_cast<int>(router_choice.Below(options.routers));
      const int pod = routers[r].Pick(views[r]);
      ++views[r][pod];
      const bool measured = sent >= options.warmup_requests;
      if (measured && slow[pod]) ++to_slow;
      if (pods[pod].Enqueue({next_arrival, r, measured}, next_arrival)) {
        step_ends.push({pods[pod].step_end(), pod});
      }
      ++sent;
      next_arrival += arrivals.Exponential(options.rate_rps);
    } else if (!step_ends.empty()) {
      const auto [now, pod] = step_ends.top();
      step_ends.pop();
      done.clear();
      if (pods[pod].EndStep(&done)) step_ends.push({pods[pod].step_end(), pod});
      for (const SimRequest& request : done) {
        --views[request.router][pod];
        if (!request.measured) continue;
        if (latencies.empty()) first_done = now;
        last_done = now;
        latencies.push_back(now - request.arrival_s);
      }
    } else {
      break;
    }
  }

  FleetResult result;
  result.measured = static_cast<int64_t>(latencies.size());
  std::sort(latencies.begin(), latencies.end());
  result.mean_s = std::accumulate(latencies.begin(), latencies.end(), 0.0) / latencies.size();
  result.p50_s = Percentile(latencies, 0.50);
  result.p99_s = Percentile(latencies, 0.99);
  result.p999_s = Percentile(latencies, 0.999);
  result.max_s = latencies.back();
  result.slow_share = static_cast<double>(to_slow) / options.measured_requests;
  uint64_t steps = 0;
  uint64_t sequences = 0;
  for (const SimPod& pod : pods) {
    steps += pod.steps();
    sequences += pod.batched_sequences();
  }
  result.mean_batch = steps > 0 ? static_cast<double>(sequences) / steps : 0;
  if (last_done > first_done) {
    result.throughput_rps = (result.measured - 1) / (last_done - first_done);
  }
  return result;
}

}  // namespace gecd::fleet_sim
