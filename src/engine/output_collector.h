#ifndef GECD_PIPELINE_OUTPUT_COLLECTOR_H_
#define GECD_PIPELINE_OUTPUT_COLLECTOR_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/engine.h"
#include "model/tokenizer.h"

// The output half of the one request pipeline (see prompt_builder.h): step events in, each
// sequence's output tokens and text out. The stop rule lives here: a stop token ends an
// output without being part of it. Used by the engine process (tokens only; the workers
// decode) and by eval and generate. Owns the tokens of unfinished sequences. Not thread-safe.
namespace gecd::pipeline {

class OutputCollector {
 public:
  // Appends `event`'s token to its sequence's output unless it is the stop token; true when
  // the event finishes the sequence, whose output Take() then hands over.
  bool Add(const engine::StepEvent& event);
  // The output of `id` so far (all of it once finished), forgotten here.
  std::vector<int32_t> Take(engine::SequenceId id);

  // What a client reads for `tokens`: the decoded bytes (special tokens skipped) with any
  // ill-formed UTF-8 (a model can stop inside a multi-byte character) replaced by U+FFFD.
  static std::string Text(const model::Tokenizer& tokenizer, std::span<const int32_t> tokens);

 private:
  absl::flat_hash_map<engine::SequenceId, std::vector<int32_t>> outputs_;
};

}  // namespace gecd::pipeline

#endif  // GECD_PIPELINE_OUTPUT_COLLECTOR_H_
