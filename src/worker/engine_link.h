#ifndef GECD_WORKER_ENGINE_LINK_H_
#define GECD_WORKER_ENGINE_LINK_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"

namespace gecd::ipc {
struct SharedMargin;
}  // namespace gecd::ipc

// What a front-end worker needs from the engine: submit a tokenized prompt, be told once when
// it has finished (or failed), cancel it. The production link is the shared-memory ring pair
// to the engine process (worker::RingEngineLink); tests plug in an in-process fake.
namespace gecd::worker {

struct EngineRequest {
  uint64_t id = 0;  // unique within this worker while in flight
  std::vector<int32_t> prompt;
  int max_new_tokens = 0;
  // The copy bias over prompt[copy_begin, copy_end), the user's text (0: off).
  float copy_bias = 0;
  int copy_begin = 0;
  int copy_end = 0;
  // CLOCK_MONOTONIC microseconds: when the RPC arrived; when it should be done (the engine
  // starts waiting requests earliest due first); and past when it is no use, so that the engine
  // drops it unstarted (0: no deadline).
  int64_t arrival_us = 0;
  int64_t due_us = 0;
  int64_t deadline_us = 0;
};

struct EngineReply {
  // OK; UNAVAILABLE when the engine restarted (epoch changed) or went away with the request in
  // flight; CANCELLED after Cancel(); other codes for engine-side rejections.
  absl::Status status;
  std::vector<int32_t> tokens;  // generated, stop token excluded
  int64_t queue_us = 0;         // arrival → first engine step that ran it
  int64_t engine_us = 0;        // first step → last token
  int64_t first_token_us = 0;   // arrival → first generated token; 0 when not reported
};

// What admission (worker/admission.h) needs to know of the engine's load beyond its own
// worker: how long the engine's steps take by batch size, and what the other workers hold.
struct EngineLoad {
  // With n sequences running, a sequence's steps are about step_fixed_us +
  // step_per_sequence_us * n apart; both 0 while the engine has not measured them.
  double step_fixed_us = 0;
  double step_per_sequence_us = 0;
  int others_admitted = 0;  // sentences admitted by the other workers, still unanswered
  // Output tokens a sequence gains per step (above 1 with speculative decoding); 0: unknown.
  double tokens_per_step = 0;
  bool known() const { return step_fixed_us > 0 || step_per_sequence_us > 0; }
};

class EngineLink {
 public:
  using Done = std::function<void(EngineReply)>;
  virtual ~EngineLink() = default;

  // Queues the request; `done` runs exactly once, on the link's own thread, never inline.
  // Errors (returned, `done` not called): UNAVAILABLE when the engine is not ready,
  // RESOURCE_EXHAUSTED when the transport is full.
  virtual absl::Status Submit(EngineRequest request, Done done) = 0;
  // Asks the engine to stop working on `id` (deadline passed, client went away). Its `done`
  // still runs, with CANCELLED, unless it already finished.
  virtual void Cancel(uint64_t id) = 0;
  // True while an engine is attached and warmed up.
  virtual bool Ready() const = 0;
  // The engine's load as last published (zeros when the link cannot tell). Any thread.
  virtual EngineLoad Load() const { return {}; }
  // Tells the other workers how many sentences this one has admitted. Any thread.
  virtual void PublishAdmitted(int /*admitted*/) {}
  // The admission margin this worker shares with the others (ipc::SharedMargin); null when the
  // link has no others to share with.
  virtual ipc::SharedMargin* SharedAdmissionMargin() { return nullptr; }
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_ENGINE_LINK_H_
