#ifndef GECD_LOADGEN_SPECULATION_COUNTERS_H_
#define GECD_LOADGEN_SPECULATION_COUNTERS_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

// What a daemon's /metrics says of speculative decoding (engine.speculate_tokens), so that a
// load run can report how much of its drafts the engine kept: gecd-load --metrics-port reads
// them before and after the run and reports the difference.
namespace gecd::loadgen {

// Counters as the daemon exports them (gecd_speculative_tokens_total and the
// gecd_tokens_per_sequence_step histogram), or their growth over a run. Plain values.
struct SpeculationCounters {
  double accepted = 0;        // draft tokens equal to the greedy choice
  double rejected = 0;        // draft tokens verified and discarded
  double sequence_steps = 0;  // a sequence's share of a step, counted once
  double tokens = 0;          // output tokens those shares emitted

  // The accepted share of the drafts; 0 with none.
  double acceptance() const;
  // Output tokens per sequence-step (1 without drafts); 0 with no step counted.
  double tokens_per_sequence_step() const;
  // The growth from `before` (read earlier from the same daemon) to this.
  SpeculationCounters Since(const SpeculationCounters& before) const;
  // One line for gecd-load's summary.
  std::string Summary() const;
  nlohmann::json ToJson() const;
};

// From a /metrics page (Prometheus text); a series absent counts 0.
SpeculationCounters ParseSpeculationCounters(const std::string& metrics);

// GET http://127.0.0.1:`port`/metrics: an error naming the port when it does not answer 200.
absl::StatusOr<SpeculationCounters> ReadSpeculationCounters(int port);

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_SPECULATION_COUNTERS_H_
