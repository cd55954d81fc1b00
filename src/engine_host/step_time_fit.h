#ifndef GECD_ENGINE_HOST_STEP_TIME_FIT_H_
#define GECD_ENGINE_HOST_STEP_TIME_FIT_H_

#include "ipc/shared_segment.h"

// What one engine step costs as a function of the sequences it runs, learned from the steps
// themselves, for the workers' admission (worker/admission.h): a step of n sequences takes about
//
//   fixed + per_sequence * n
//
// On the CPU backend most of a step at small batches is reading the weights once (the fixed
// part); each sequence adds its share of the matmuls, attention and sampling. A model
// proportional to n (what admission learned before) overstates a larger batch by the fixed part
// and so refuses work the engine could do in time; one that ignores n admits too much.
namespace gecd::engine_host {

// A least-squares line through (sequences, microseconds) of the recent steps, each step's
// weight decaying by half every `half_life_steps` steps, so that the fit follows a machine whose
// speed changes (another tenant, a CPU quota) within seconds. Until the batch has varied enough
// to tell the two parts apart (a spread of under one sequence), the step is split in half
// between them: a guess that admission's own error margin then corrects. Not thread-safe (the
// engine loop's own).
class StepTimeFit {
 public:
  explicit StepTimeFit(double half_life_steps = 500);

  void Observe(int sequences, double step_us);
  // Zeros before any step.
  ipc::StepTime Fitted() const;

 private:
  double decay_;
  double w_ = 0, n_ = 0, nn_ = 0, t_ = 0, nt_ = 0;  // decayed sums of 1, n, n², t, n·t
};

}  // namespace gecd::engine_host

#endif  // GECD_ENGINE_HOST_STEP_TIME_FIT_H_
