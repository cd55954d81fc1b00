#ifndef GECD_ENGINE_HOST_ENGINE_PROCESS_H_
#define GECD_ENGINE_HOST_ENGINE_PROCESS_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "config/config.h"
#include "engine/engine.h"
#include "engine/output_collector.h"
#include "engine_host/step_time_fit.h"
#include "ipc/messages.h"
#include "ipc/ring.h"
#include "ipc/shared_segment.h"
#include "metrics/metrics.h"

// The engine process's work (engine_host::RunEngineProcess runs it on the segment the supervisor
// named): one thread that takes SUBMIT/CANCEL records off every worker's request ring, runs
// continuous-batching steps, and writes DONE records to the response rings, sleeping on the
// segment's doorbell when there is nothing to do. Model steps run on a second, compute thread,
// pipelined: step N is committed and the rings served while step N+1 computes. The metrics go to
// the engine's block of the segment's metrics region (metrics/metrics.h).
namespace gecd::engine_host {

// What the loop drives: the Engine over a model backend, or the echo stand-in (defined in
// engine_process.cc).
class Generator;

class EngineLoop {
 public:
  // An engine started while the segment holds a step-time line (its predecessor's: it died, and
  // the supervisor started this one) publishes its own only from this many steps on.
  static constexpr int kStepsBeforeReplacingALine = 64;

  // Loads the model config.engine.backend names ("cpu", or "echo": no model, every request's
  // output is its prompt) and warms it up with one tiny generation. `segment` must outlive the
  // loop, and its metrics region must hold the engine's block; its current engine_epoch is the
  // loop's.
  static absl::StatusOr<std::unique_ptr<EngineLoop>> Create(const config::Config& config,
                                                            const ipc::SharedSegment& segment,
                                                            ipc::WaitOptions wait = {});
  // The same over a generator of the caller's (tests: one whose steps they control).
  static absl::StatusOr<std::unique_ptr<EngineLoop>> Create(std::unique_ptr<Generator> generator,
                                                            const ipc::SharedSegment& segment,
                                                            ipc::WaitOptions wait = {});
  ~EngineLoop();

  // Sets engine_ready_epoch and serves. Returns OK once header.draining is set (or Drain() was
  // called) and no request is left (running, or a reply not yet written); FailedPrecondition
  // when engine_epoch moved on (the supervisor started another engine).
  absl::Status Run();

  // From any thread or a signal handler: drain as on header.draining, for this engine alone.
  void Drain();

 private:
  struct Sequence {
    int worker = 0;
    uint64_t request_id = 0;
    int64_t arrival_us = 0;
    int64_t first_step_us = 0;
    int64_t first_token_us = 0;  // when the step that produced its first token was committed
    int64_t last_token_us = 0;   // ... and its latest tokens
  };
  struct Endpoint {
    ipc::WorkerChannel channel;
    ipc::RingConsumer requests;
    ipc::RingProducer responses;
    std::vector<ipc::DoneRecord> outbox;  // replies the response ring had no room for yet
    absl::flat_hash_map<uint64_t, engine::SequenceId> live;  // by request id
  };

  EngineLoop(const ipc::SharedSegment& segment, metrics::ProcessMetrics& metrics,
             std::unique_ptr<Generator> generator, ipc::WaitOptions wait);
  void AttachEndpoint(Endpoint& endpoint);
  void ResetDeadChannels();
  void DrainRequests();
  // What the workers sent since the last call: dead channels reset, then their requests added
  // and cancels applied. At the top of the loop, and within a step just before the next one is
  // planned (Generator::Step), so that a request that came in while a step computed joins the
  // next one.
  void TakeArrivals();
  void Admit(int worker, ipc::SubmitRecord record);
  void CancelRequest(int worker, const ipc::CancelRecord& record);
  absl::Status RunStep();
  void Reply(engine::SequenceId id, absl::StatusCode code, std::string message = {});
  void QueueReply(int worker, ipc::DoneRecord record);
  void SendReplies();
  bool HasRequests() const;
  bool RepliesPending() const;
  // engine_has_work in the segment header, for the supervisor's watchdog.
  void PublishHasWork();

  const ipc::SharedSegment& segment_;
  ipc::SegmentHeader* const header_;
  metrics::ProcessMetrics& metrics_;
  const uint64_t epoch_;
  const ipc::WaitOptions wait_;
  std::atomic<bool> drain_requested_{false};
  std::unique_ptr<Generator> generator_;
  std::vector<Endpoint> endpoints_;
  absl::flat_hash_map<engine::SequenceId, Sequence> sequences_;
  engine::OutputCollector outputs_;  // the generated tokens of sequences_
  engine::SequenceId next_id_ = 1;
  bool published_has_work_ = false;  // the supervisor clears the flag when an engine dies
  // What a step costs, for the step-time metrics; and the time between a sequence's steps by
  // how many sequences run, published after every step for admission (see RunStep).
  StepTimeFit step_time_;
  StepTimeFit sequence_step_;
  // Steps to run before this engine's own line replaces the one a dead predecessor left in the
  // segment (0: publishes from its first step; see RunStep).
  int steps_before_publishing_;
};

}  // namespace gecd::engine_host

#endif  // GECD_ENGINE_HOST_ENGINE_PROCESS_H_
