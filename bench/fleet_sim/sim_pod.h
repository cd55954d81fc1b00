#ifndef GECD_BENCH_FLEET_SIM_SIM_POD_H_
#define GECD_BENCH_FLEET_SIM_SIM_POD_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"

namespace gecd::fleet_sim {

// The cost curve of one pod's continuous-batching engine, as the gecd engine schedules it
// (src/engine/engine.cc): a request joins the running batch at a step boundary, its first step
// prefills its prompt and samples its first token, and each later step decodes one token, so
// it needs steps_per_request steps in all. A step costs
//   step_fixed_s + decode_token_s * (sequences decoding) + prompt_token_s * (prompt tokens)
// and takes at most max_batch sequences and max_step_tokens tokens; the rest wait in a FIFO.
struct PodModel {
  double step_fixed_s = 0;
  double decode_token_s = 0;
  double prompt_token_s = 0;
  int max_batch = 128;
  int max_step_tokens = 2048;
  int steps_per_request = 50;
  int prompt_tokens = 50;

  // Every field in range; the error names the field. The token budget must hold a full batch's
  // steady state (its decodes plus the prompts of the requests that replace the finished ones),
  // which is what Capacity() assumes.
  absl::Status Validate() const;

  // The time of a step with `decodes` sequences decoding and `joiners` prefilling.
  double StepTime(int decodes, int joiners) const;

  // Requests per second at a full batch in steady state: each step finishes and admits
  // max_batch / steps_per_request requests on average.
  double Capacity() const;

  // The same curve with every time multiplied by `factor` (its capacity divided by it).
  PodModel Scaled(double factor) const;
};

// The model calibrated on the CPU backend's benchmarks of 2026-11-29/30 (bench/RESULTS.md,
// docs/ROUTING.md "Fleet-scale simulation"): the ≈ 9 M-parameter model, 2 BLAS threads, 50
// prompt + 50 generated tokens, batch 128.
PodModel CpuCalibratedPodModel();

// A request as the pod sees it: when it arrived, which router sent it, whether it counts.
struct SimRequest {
  double arrival_s = 0;
  int router = 0;
  bool measured = false;
};

// One pod's engine: the running batch, the FIFO beyond it and the step in progress. Times are
// the simulation's clock; the pod only moves when told (Enqueue, EndStep).
class SimPod {
 public:
  // `slowdown` multiplies every step time (2 for a pod twice as slow).
  SimPod(const PodModel& model, double slowdown);

  // Adds a request arriving at `now`. An idle pod starts a step at once and returns true: the
  // caller then schedules EndStep at step_end(). A busy pod queues it for the next boundary.
  bool Enqueue(const SimRequest& request, double now);

  // Ends the step in progress (at step_end()): appends the requests it finished to *done and
  // starts the next step when work is left, returning true then (the new step_end()).
  bool EndStep(std::vector<SimRequest>* done);

  double step_end() const { return step_end_; }
  bool busy() const { return busy_; }
  // Requests on the pod: running plus queued.
  int in_flight() const { return static_cast<int>(running_.size() + waiting_.size()); }
  double slowdown() const { return slowdown_; }
  uint64_t steps() const { return steps_done_; }
  // Sum over steps of the sequences in the step (for the mean batch).
  uint64_t batched_sequences() const { return batched_sequences_; }

 private:
  struct Running {
    uint64_t finish_step;  // steps_done_ when it has had all its steps
    SimRequest request;
  };

  void StartStep(double now);

  PodModel model_;
  double slowdown_;
  std::deque<SimRequest> waiting_;
  // Every request needs the same number of steps, so they finish in the order they joined.
  std::deque<Running> running_;
  uint64_t steps_done_ = 0;
  uint64_t batched_sequences_ = 0;
  bool busy_ = false;
  double step_end_ = 0;
};

}  // namespace gecd::fleet_sim

#endif  // GECD_BENCH_FLEET_SIM_SIM_POD_H_
