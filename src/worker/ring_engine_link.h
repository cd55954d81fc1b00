#ifndef GECD_WORKER_RING_ENGINE_LINK_H_
#define GECD_WORKER_RING_ENGINE_LINK_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "ipc/messages.h"
#include "ipc/ring.h"
#include "ipc/shared_segment.h"
#include "worker/engine_link.h"

namespace gecd::worker {

struct RingEngineLinkOptions {
  // The reader thread's spin before sleeping; its timeout bounds how long an engine restart
  // goes unnoticed when no reply wakes it.
  ipc::WaitOptions wait;
  // While the engine is busy (it has not taken the last message yet) Submit and Cancel append
  // to an open message instead of publishing one per request; the reader thread publishes it
  // at the latest this long after it was opened.
  std::chrono::microseconds flush_delay{50};
  // How long requests wait for an engine while none is ready (a restart takes a few hundred
  // ms) before they fail with UNAVAILABLE; the callers' own deadlines cancel them sooner.
  std::chrono::milliseconds engine_wait{10'000};
};

// The production EngineLink: worker `index`'s channel of the shared segment. Owns the reader
// thread, which takes DONE records off the response ring and runs `done`, publishes open
// messages, and re-submits every in-flight request to the next engine once the engine that took
// it is gone (engine_ready_epoch no longer equals the epoch it was submitted under): a
// correction is idempotent, so an engine crash costs the request the restart's latency, not its
// answer. Requests submitted while no engine is ready after one was (a restart) are held for
// the next one likewise; before a first engine, Submit fails UNAVAILABLE. Held
// requests wait until an engine is ready, the caller cancels them (their deadline), or
// options.engine_wait passes without an engine (UNAVAILABLE); a request whose second engine dies
// too is failed with UNAVAILABLE, so that a request that crashes engines cannot crash them
// forever. Submit/Cancel may be called from any thread.
class RingEngineLink final : public EngineLink {
 public:
  // `segment` must outlive the link. When the channel awaits the engine's reset after a worker
  // restart (worker_channel.h), the link attaches once it is done; Ready() is false till then.
  static absl::StatusOr<std::unique_ptr<RingEngineLink>> Create(const ipc::SharedSegment& segment,
                                                                int index,
                                                                RingEngineLinkOptions options = {});
  // Requests still in flight end with UNAVAILABLE.
  ~RingEngineLink() override;

  absl::Status Submit(EngineRequest request, Done done) override;
  void Cancel(uint64_t id) override;
  bool Ready() const override;
  EngineLoad Load() const override;
  void PublishAdmitted(int admitted) override;
  ipc::SharedMargin* SharedAdmissionMargin() override { return segment_.admission_margin(); }

 private:
  struct InFlight {
    Done done;
    // As last sent; its epoch is the engine that holds it, 0 while never sent (held).
    ipc::SubmitRecord record;
    int resubmits = 0;       // sent again after the engine that held it died
    bool cancelled = false;  // the engine was asked to stop it: never re-submitted
  };
  using Completion = std::pair<Done, EngineReply>;

  RingEngineLink(const ipc::SharedSegment& segment, int index, RingEngineLinkOptions options);
  bool TryAttach() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AppendLocked(const ipc::Record& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReaderLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void DrainResponses() ABSL_LOCKS_EXCLUDED(mu_);
  void FlushIfDue() ABSL_LOCKS_EXCLUDED(mu_);
  // Re-submits the requests of engines other than the one ready now, and sends the held ones;
  // while none is ready they wait, and fail once options.engine_wait has passed without one.
  void ResubmitStale() ABSL_LOCKS_EXCLUDED(mu_);
  void ResubmitStaleLocked(uint64_t ready_epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `done` for the reader thread (never inline: the caller may hold its own locks).
  void AnswerLocked(Done done, EngineReply reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailAll(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  static void Run(std::vector<Completion>& completions);

  const ipc::SharedSegment& segment_;
  const int index_;
  ipc::SegmentHeader* const header_;
  const ipc::WorkerChannel channel_;
  const ipc::Doorbell engine_doorbell_;
  const ipc::Doorbell reader_doorbell_;  // the response ring's
  const uint64_t generation_;
  const RingEngineLinkOptions options_;
  std::atomic<bool> attached_{false};
  std::atomic<bool> flush_wanted_{false};
  std::atomic<bool> stop_{false};

  Mutex mu_;
  ipc::RingProducer producer_ ABSL_GUARDED_BY(mu_);
  ipc::MessageWriter writer_ ABSL_GUARDED_BY(mu_);
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point open_since_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, InFlight> in_flight_ ABSL_GUARDED_BY(mu_);
  // the ready epoch ResubmitStale last acted on
  uint64_t checked_ready_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // whether an engine has been ready since the link was created: only then are requests held
  // while none is
  bool engine_seen_ ABSL_GUARDED_BY(mu_) = false;
  // since when no engine has been ready (the link's creation until the first)
  std::chrono::steady_clock::time_point no_engine_since_ ABSL_GUARDED_BY(mu_);
  // answered by the link itself, not by the engine
  std::vector<Completion> local_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> local_pending_{false};

  ipc::RingConsumer consumer_;  // reader thread only
  std::thread reader_;
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_RING_ENGINE_LINK_H_
