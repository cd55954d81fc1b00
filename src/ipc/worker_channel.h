#ifndef GECD_IPC_WORKER_CHANNEL_H_
#define GECD_IPC_WORKER_CHANNEL_H_

#include <atomic>
#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "ipc/ring.h"

// One worker's two rings in the shared segment: requests (worker -> engine; the engine waits on
// the segment's one doorbell for all workers) and responses (engine -> worker; the worker waits
// on this ring's own doorbell). Region layout: [ChannelHeader][request ring][response ring].
//
// Worker restart protocol. The rings are reset by the engine, the only live party once a worker
// died, so nobody touches an index while another process uses it:
//   1. the supervisor, having reaped the worker, calls SharedSegment::ResetWorkerChannel(i),
//      which bumps `generation` and rings the engine's doorbell, then starts the replacement;
//   2. the engine frees the dead worker's sequences, drops its unsent replies, resets both
//      rings and sets `engine_generation = generation`;
//   3. the replacement's link attaches to the rings only once the two are equal.
// An engine starting up does step 2 for every channel whose generations differ.
namespace gecd::ipc {

struct ChannelHeader {
  alignas(64) std::atomic<uint64_t> generation;
  std::atomic<uint64_t> engine_generation;
  // The generation whose worker's gRPC server listens (set by that worker); none at Format.
  std::atomic<uint64_t> listening_generation;
  // The worker's admitted, unanswered sentences (its admission's in-flight count), which the
  // other workers add to their own to predict the engine's batch. Zeroed when the worker dies.
  alignas(64) std::atomic<int32_t> admitted;
};

// A view of one channel's region; copyable, owns nothing.
class WorkerChannel {
 public:
  static size_t RegionBytes(uint32_t ring_slots, uint32_t ring_slot_bytes);
  static absl::StatusOr<WorkerChannel> Format(std::span<uint8_t> region, uint32_t ring_slots,
                                              uint32_t ring_slot_bytes);
  static absl::StatusOr<WorkerChannel> Attach(std::span<uint8_t> region);

  WorkerChannel() = default;

  ChannelHeader* header() const { return header_; }
  const Ring& requests() const { return requests_; }
  const Ring& responses() const { return responses_; }

  // Supervisor, after the worker died: step 1 above (without the doorbell).
  void RequestReset() {
    header_->admitted.store(0, std::memory_order_relaxed);
    header_->generation.fetch_add(1, std::memory_order_acq_rel);
  }
  // Engine: whether step 2 is due, and step 2's ring part.
  bool ResetPending() const {
    return header_->generation.load(std::memory_order_acquire) !=
           header_->engine_generation.load(std::memory_order_relaxed);
  }
  void CompleteReset();

  // Worker, once its gRPC server listens; the supervisor's readiness reads it. A worker that
  // died no longer counts once the supervisor bumped the generation (RequestReset).
  void MarkListening() {
    header_->listening_generation.store(header_->generation.load(std::memory_order_acquire),
                                        std::memory_order_release);
  }
  // Worker: its admitted count; others: theirs (see ChannelHeader::admitted).
  void PublishAdmitted(int admitted) const {
    header_->admitted.store(admitted, std::memory_order_relaxed);
  }
  int admitted() const { return header_->admitted.load(std::memory_order_relaxed); }
  bool Listening() const {
    return header_->listening_generation.load(std::memory_order_acquire) ==
           header_->generation.load(std::memory_order_acquire);
  }

 private:
  ChannelHeader* header_ = nullptr;
  Ring requests_;
  Ring responses_;
};

}  // namespace gecd::ipc

#endif  // GECD_IPC_WORKER_CHANNEL_H_
