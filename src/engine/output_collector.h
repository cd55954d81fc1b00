#ifndef GECD_ENGINE_OUTPUT_COLLECTOR_H_
#define GECD_ENGINE_OUTPUT_COLLECTOR_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/engine.h"

// The engine-side half of the request pipeline: step events in, each sequence's output tokens
// out. The stop rule lives here: a stop token ends an output without being part of it. Used by
// the engine process and by eval and generate; the text a client reads is text/output_text.h's.
// Owns the tokens of unfinished sequences. Not thread-safe.
namespace gecd::engine {

class OutputCollector {
 public:
  // Appends `event`'s token to its sequence's output unless it is the stop token; true when
  // the event finishes the sequence, whose output Take() then hands over.
  bool Add(const StepEvent& event);
  // The output of `id` so far (all of it once finished), forgotten here.
  std::vector<int32_t> Take(SequenceId id);

 private:
  absl::flat_hash_map<SequenceId, std::vector<int32_t>> outputs_;
};

}  // namespace gecd::engine

#endif  // GECD_ENGINE_OUTPUT_COLLECTOR_H_
