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

namespace {

std::unique_ptr<route::Picker> MakePicker(Policy policy) {
  switch (policy) {
    case Policy::kRoundRobin:
      return std::make_unique<route::Picker>(route::Policy::kRoundRobin);
    case Policy::kP2C:
      return std::make_unique<route::Picker>(route::Policy::kP2c);
    case Policy::kLeastRequest:
      return std::make_unique<route::Picker>(route::Policy::kLeastRequest);
    case Policy::kRandom:
      break;
  }
  return nullptr;
}

}  // namespace

SimRouter::SimRouter(Policy policy, int pods, uint64_t seed)
    : pods_(pods), random_(seed), picker_(MakePicker(policy)) {}

int SimRouter::Pick(absl::Span<const int> in_flight) {
  if (picker_ == nullptr) return static_cast<int>(random_.Below(pods_));
  return picker_->Pick(
      pods_, [&](int i) { return route::Candidate{.in_flight = in_flight[i]}; }, -1,
      [&](int k) { return static_cast<int>(random_.Below(k)); });
}

}  // namespace gecd::fleet_sim
