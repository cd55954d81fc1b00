#ifndef GECD_EVAL_CORRECTOR_H_
#define GECD_EVAL_CORRECTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/progress_bar.h"

// What `gecd eval` runs sentences through: a model in-process (EngineCorrector) or a running
// server (GrpcCorrector).
namespace gecd::eval {

// The outcome of one run over all sentences.
struct CorrectionRun {
  std::vector<std::string> outputs;  // one per input, in input order; "" where it failed
  std::vector<std::string> errors;   // parallel to outputs; "" where it succeeded
  int64_t failed = 0;
  int64_t generated_tokens = 0;  // output tokens, stop tokens excluded
  double wall_s = 0;             // the whole run, first request to last answer
  // In-process runs only (0 otherwise): the sequential engine steps of all sentences (a
  // sentence's steps: those that sampled for it), and the drafts speculative decoding
  // verified.
  int64_t sequence_steps = 0;
  int64_t accepted_drafts = 0;
  int64_t rejected_drafts = 0;
  // In-process runs only: the engine's part of wall_s, from its first step to its last, without
  // building the prompts (tokenization, the spelling stage), which the daemon's workers do
  // beside the engine.
  double engine_wall_s = 0;
};

// Runs a whole set of sentences and returns every output. A sentence the model or server
// refuses (too long, …) fails alone; the run as a whole fails only when it cannot go on.
class Corrector {
 public:
  virtual ~Corrector() = default;
  // `progress` (may be null) advances once per finished sentence.
  virtual absl::StatusOr<CorrectionRun> CorrectAll(const std::vector<std::string>& texts,
                                                   ProgressBar* progress) = 0;
  // The kernels an in-process engine runs (its backend's Describe(), e.g. "cpu, bf16 matmuls:
  // ..."); "" for a server.
  virtual std::string Describe() const { return ""; }
};

}  // namespace gecd::eval

#endif  // GECD_EVAL_CORRECTOR_H_
