#ifndef GECD_ROUTE_PICKER_PICKER_H_
#define GECD_ROUTE_PICKER_PICKER_H_

#include <atomic>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

// The balancing decision of `gecd route` (route.policy), over the eligible endpoints' loads:
//  - p2c: two distinct endpoints drawn uniformly; the one with the lower load wins, ties at
//    random. Load is (in flight + 1) / weight, so an endpoint in slow start (weight < 1)
//    takes a request only from busier peers.
//  - least_request: the lowest load of all, ties at random.
//  - round_robin: each in turn, blind to load (for comparison).
// Thread-safe: each thread draws from its own random generator, unless the caller passes its own
// random source (a simulation's seeded stream, bench/fleet_sim), which is then the caller's to
// serialise.
namespace gecd::route {

struct Candidate {
  int64_t in_flight = 0;
  double weight = 1;  // (0, 1]
};

enum class Policy { kP2c, kLeastRequest, kRoundRobin };
absl::StatusOr<Policy> ParsePolicy(std::string_view name);

class Picker {
 public:
  explicit Picker(Policy policy) : policy_(policy) {}

  // An index in [0, n), never `exclude` (pass -1 for none); -1 when nothing is left.
  // `candidate(i)` is read only for the indices the policy looks at (two for p2c).
  int Pick(int n, absl::FunctionRef<Candidate(int)> candidate, int exclude = -1);
  // The same, with every random draw taken from `uniform(k)`, which returns an int in [0, k).
  int Pick(int n, absl::FunctionRef<Candidate(int)> candidate, int exclude,
           absl::FunctionRef<int(int)> uniform);
  int Pick(std::span<const Candidate> candidates, int exclude = -1) {
    return Pick(
        static_cast<int>(candidates.size()), [&](int i) { return candidates[i]; }, exclude);
  }

  Policy policy() const { return policy_; }

 private:
  const Policy policy_;
  std::atomic<uint64_t> next_{0};  // round_robin's turn
};

// Seeds this thread's generator (tests; otherwise from std::random_device).
void SeedPickerThread(uint64_t seed);

}  // namespace gecd::route

#endif  // GECD_ROUTE_PICKER_PICKER_H_
