#include "route_picker/picker.h"

#include "absl/strings/str_cat.h"

namespace gecd::route {
namespace {

std::mt19937_64& ThreadRng() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng;
}

// Uniform in [0, n), from this thread's generator.
int ThreadUniform(int n) { return std::uniform_int_distribution<int>(0, n - 1)(ThreadRng()); }

double Load(const Candidate& c) { return static_cast<double>(c.in_flight + 1) / c.weight; }

// The i-th of the candidates that are not `exclude`.
int Skip(int i, int exclude) { return exclude >= 0 && i >= exclude ? i + 1 : i; }

}  // namespace

absl::StatusOr<Policy> ParsePolicy(std::string_view name) {
  if (name == "p2c") return Policy::kP2c;
  if (name == "least_request") return Policy::kLeastRequest;
  if (name == "round_robin") return Policy::kRoundRobin;
  return absl::InvalidArgumentError(
      absl::StrCat("route.policy: expected one of p2c|round_robin|least_request, got '",
                   std::string(name), "'"));
}

void SeedPickerThread(uint64_t seed) { ThreadRng().seed(seed); }

int Picker::Pick(int n, absl::FunctionRef<Candidate(int)> candidate, int exclude) {
  return Pick(n, candidate, exclude, ThreadUniform);
}

int Picker::Pick(int n, absl::FunctionRef<Candidate(int)> candidate, int exclude,
                 absl::FunctionRef<int(int)> uniform) {
  if (exclude >= n) exclude = -1;
  const int left = n - (exclude >= 0 ? 1 : 0);
  if (left <= 0) return -1;
  if (left == 1) return Skip(0, exclude);
  switch (policy_) {
    case Policy::kRoundRobin:
      return Skip(static_cast<int>(next_.fetch_add(1, std::memory_order_relaxed) % left), exclude);
    case Policy::kP2c: {
      // Two distinct draws: the second from the left - 1 others, shifted past the first.
      const int a = uniform(left);
      int b = uniform(left - 1);
      if (b >= a) ++b;
      const int i = Skip(a, exclude), j = Skip(b, exclude);
      const double li = Load(candidate(i)), lj = Load(candidate(j));
      if (li != lj) return li < lj ? i : j;
      return uniform(2) == 0 ? i : j;
    }
    case Policy::kLeastRequest: {
      // Reservoir sampling among the ties keeps the choice uniform without a second pass.
      int best = -1, ties = 0;
      double best_load = 0;
      for (int i = 0; i < n; ++i) {
        if (i == exclude) continue;
        const double l = Load(candidate(i));
        if (best < 0 || l < best_load) {
          best = i;
          best_load = l;
          ties = 1;
        } else if (l == best_load && uniform(++ties) == 0) {
          best = i;
        }
      }
      return best;
    }
  }
  return -1;
}

}  // namespace gecd::route
