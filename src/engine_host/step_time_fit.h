#ifndef GECD_ENGINE_HOST_STEP_TIME_FIT_H_
#define GECD_ENGINE_HOST_STEP_TIME_FIT_H_

#include "ipc/shared_segment.h"

// What one engine step costs as a function of the sequences it runs, learned from the steps
// themselves, for the workers' admission (worker/admission.h): a decoding step of n sequences
// takes about
//
//   fixed + per_sequence * n
//
// On the CPU backend most of a step at small batches is reading the weights once (the fixed
// part); each sequence adds its share of the matmuls, attention and sampling. A model
// proportional to n (what admission learned before) overstates a larger batch by the fixed part
// and so refuses work the engine could do in time; one that ignores n admits too much.
//
// Steps also carry prefill chunks (and, with speculative decoding, drafts): positions beyond
// one per sequence, each costing its share of the matmuls. Fitted on sequences alone, a step
// that prefilled a whole text's sentences (a thousand positions) read as a step of many
// sequences that cost a lot, and raised both parts: a 36-sentence text was predicted at 1.8 s
// and took 0.2-0.5 s. So the fit has a third term, per_extra_token * (positions - n), and
// publishes the two parts a decoding step costs.
namespace gecd::engine_host {

// A least-squares plane through (sequences, extra positions, microseconds) of the recent steps,
// each step's weight decaying by half every `half_life_steps` steps, so that the fit follows a
// machine whose speed changes (another tenant, a CPU quota) within seconds. Until the batch has
// varied enough to tell the fixed and per-sequence parts apart (a spread of under one
// sequence), the decoding step is split in half between them: a guess that admission's own
// error margin then corrects. While the extra positions have not varied (no prefill beyond one
// position, or always the same), or vary in step with the sequences, their term is left out.
// Not thread-safe (the engine loop's own).
class StepTimeFit {
 public:
  explicit StepTimeFit(double half_life_steps = 500);

  // A step of `sequences` computing `positions` positions in all (>= sequences) took `step_us`.
  void Observe(int sequences, int positions, double step_us);
  // A decoding step's parts; zeros before any step.
  ipc::StepTime Fitted() const;
  // What each position beyond one per sequence adds; 0 while unknown.
  double per_extra_token_us() const;

 private:
  struct Fit {
    double fixed = 0, per_sequence = 0, per_extra = 0;
  };
  Fit Solve() const;

  double decay_;
  // Decayed sums of 1, n, m, n², m², n·m, t, n·t, m·t (n sequences, m extra positions, t µs).
  double w_ = 0, n_ = 0, m_ = 0, nn_ = 0, mm_ = 0, nm_ = 0, t_ = 0, nt_ = 0, mt_ = 0;
};

}  // namespace gecd::engine_host

#endif  // GECD_ENGINE_HOST_STEP_TIME_FIT_H_
