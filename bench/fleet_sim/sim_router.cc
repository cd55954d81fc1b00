#include "fleet_sim/sim_router.h"

#include "absl/strings/str_cat.h"

namespace gecd::fleet_sim {

absl::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kRoundRobin:
      return "round_robin";
    case Policy::kRandom:
      return "random";
    case Policy::kP2C:
      return "p2c";
    case Policy::kLeastRequest:
      return "least_request";
  }
  return "?";
}

absl::StatusOr<Policy> ParsePolicy(absl::string_view name) {
  for (Policy p : {Policy::kRoundRobin, Policy::kRandom, Policy::kP2C, Policy::kLeastRequest}) {
    if (name == PolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("policy '", name, "' is not one of round_robin, random, p2c, least_request"));
}

SimRouter::SimRouter(Policy policy, int pods, uint64_t seed)
    : policy_(policy), pods_(pods), random_(seed), next_(static_cast<int>(random_.Below(pods))) {
  minima_.reserve(pods);
}

int SimRouter::Pick(absl::Span<const int> in_flight) {
  switch (policy_) {
    case Policy::kRoundRobin: {
      const int pick = next_;
      next_ = next_ + 1 == pods_ ? 0 : next_ + 1;
      return pick;
    }
    case Policy::kRandom:
      return static_cast<int>(random_.Below(pods_));
    case Policy::kP2C: {
      if (pods_ == 1) return 0;
      const int a = static_cast<int>(random_.Below(pods_));
      int b = static_cast<int>(random_.Below(pods_ - 1));
      if (b >= a) ++b;  // distinct from a, uniform over the others
      if (in_flight[a] != in_flight[b]) return in_flight[a] < in_flight[b] ? a : b;
      return random_.Below(2) == 0 ? a : b;
    }
    case Policy::kLeastRequest: {
      int least = in_flight[0];
      minima_.assign(1, 0);
      for (int i = 1; i < pods_; ++i) {
        if (in_flight[i] < least) {
          least = in_flight[i];
          minima_.assign(1, i);
        } else if (in_flight[i] == least) {
          minima_.push_back(i);
        }
      }
      if (minima_.size() == 1) return minima_[0];
      return minima_[random_.Below(static_cast<uint32_t>(minima_.size()))];
    }
  }
  return 0;
}

}  // namespace gecd::fleet_sim
