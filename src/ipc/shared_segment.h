#ifndef GECD_IPC_SHARED_SEGMENT_H_
#define GECD_IPC_SHARED_SEGMENT_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ipc/worker_channel.h"

// One POSIX shared-memory segment per server instance (shm_open, mode 0600), created by the
// supervisor and mapped by every child. Layout, each part 64-byte aligned:
//   [SegmentHeader][metrics region][worker channel 0] ... [worker channel N-1]
// A worker channel holds that worker's request ring (worker -> engine) and response ring
// (engine -> worker); see ring.h. The supervisor unlinks the name at shutdown; the mapping
// lives until the last process unmaps it.
namespace gecd::ipc {

struct SegmentOptions {
  int num_workers = 1;
  uint32_t ring_slots = 1024;  // power of two
  uint32_t ring_slot_bytes = 4096;
  size_t metrics_bytes = 0;  // for metrics::MetricsRegion
};

// The longest engine start-up failure message the segment keeps; longer ones are cut.
inline constexpr size_t kEngineFailureCapacity = 1024;

// The time between two steps of a sequence as the engine measures it: with n sequences running,
// about fixed_us + per_sequence_us * n (engine_host/engine_process.cc, RunStep). Zeros: not
// measured yet.
struct StepTime {
  float fixed_us = 0;
  float per_sequence_us = 0;
  bool known() const { return fixed_us > 0 || per_sequence_us > 0; }
};
static_assert(sizeof(StepTime) == sizeof(uint64_t), "published as one atomic word");

// The margin the workers' admission applies to its predictions and steers by its answers
// (worker/admission.h), one per pod: every worker's sentences share the one engine, so a late
// answer says the same of all of them. Kept per worker, a worker whose share of answers dried up
// could not steer its own: after a start-up flood took every margin to its top, the worker that
// admitted first kept the engine full, learned from its answers and relaxed, while the other
// admitted 4 sentences a second for the rest of the run and refused the rest (session 19, short
// sentences at 3x). Any worker updates it (compare-and-swap on each word).
//
// Besides the margin, the late mark (see worker/admission.h): the margin a late answer asks for
// and the sentences in flight it was admitted with, fading to the margin's floor; its three
// words are stored without compare-and-swap (worker::AdmissionController::Late says why).
struct SharedMargin {
  // The margin's range: below 1 admits sentences predicted a little over their budget (while
  // answers keep in time); the top bounds how far a burst of late answers can close admission.
  static constexpr double kMin = 0.7;
  static constexpr double kMax = 2.5;
  // The late mark's time constant: its excess over kMin (log scale) falls by e in this time.
  static constexpr double kMarkFadeUs = 30e6;

  std::atomic<uint64_t> margin_bits{0};    // a double's bits; 0: never steered (a margin of 1)
  std::atomic<int64_t> last_late_us{0};    // when an answer was last late (CLOCK_MONOTONIC µs)
  std::atomic<int64_t> relaxed_us{0};      // the margin's relaxation is applied up to then
  std::atomic<int64_t> in_time_run{0};     // answers in time since the last late one, pod-wide
  std::atomic<int64_t> run_quiet_us{0};    // when that run reached the quiet count; 0: not yet
  std::atomic<uint64_t> mark_bits{0};      // the late mark at mark_us, a double's bits; 0: none
  std::atomic<int64_t> mark_us{0};         // when the mark was last set (CLOCK_MONOTONIC µs)
  std::atomic<int64_t> mark_in_flight{0};  // the fewest in flight a late answer at it had

  // The margin `bits` of margin_bits stand for.
  static double Of(uint64_t bits) { return bits == 0 ? 1.0 : std::bit_cast<double>(bits); }
  double Value() const { return Of(margin_bits.load(std::memory_order_relaxed)); }
  // The sentences in flight the late mark applies from (see mark_in_flight); 0 when none was set.
  int64_t MarkInFlight() const {
    return mark_bits.load(std::memory_order_relaxed) == 0
               ? 0
               : mark_in_flight.load(std::memory_order_relaxed);
  }
  // The late mark at `now_us`, faded; kMin when none was set.
  double MarkAt(int64_t now_us) const {
    const uint64_t bits = mark_bits.load(std::memory_order_relaxed);
    if (bits == 0) return kMin;
    const double age_us =
        std::max<double>(0, static_cast<double>(now_us - mark_us.load(std::memory_order_relaxed)));
    return kMin *
           std::exp(std::log(std::bit_cast<double>(bits) / kMin) * std::exp(-age_us / kMarkFadeUs));
  }
};

// Shared state every process reads. Written only as noted.
struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t num_workers;
  uint64_t total_bytes;
  // Geometry, written at Create.
  uint32_t ring_slots;
  uint32_t ring_slot_bytes;
  uint64_t metrics_offset;
  uint64_t metrics_bytes;
  uint64_t channels_offset;
  uint64_t channel_bytes;  // per worker, 64-byte multiple
  // Bumped by the supervisor before it starts an engine; workers fail requests of an older
  // epoch with UNAVAILABLE.
  alignas(64) std::atomic<uint64_t> engine_epoch;
  // Set by the engine (to its epoch) once its model is loaded and warmed up; cleared by the
  // supervisor when the engine dies.
  std::atomic<uint64_t> engine_ready_epoch;
  // Set by the supervisor on SIGTERM: workers stop accepting, the engine drains.
  std::atomic<uint32_t> draining;
  // The engine's doorbell (an ipc::Doorbell, see engine_doorbell()): after posting to a request
  // ring a worker bumps and futex-wakes it, but only when engine_sleeping is set.
  alignas(64) std::atomic<uint32_t> engine_doorbell;
  std::atomic<uint32_t> engine_sleeping;
  // The engine's progress, for the supervisor's systemd watchdog: engine_steps counts the steps
  // it finished; engine_has_work is set while it holds sequences still to step (set before a
  // step, so one that never returns leaves it set). See SharedSegment::EngineWorkQueued.
  alignas(64) std::atomic<uint64_t> engine_steps;
  std::atomic<uint32_t> engine_has_work;
  // The engine's StepTime, both floats in one word so that a reader never mixes two fits;
  // written by the engine, read by the workers' admission. See SharedSegment::step_time().
  std::atomic<uint64_t> engine_step_time;
  // Output tokens a sequence gains per step, as a float's bits: 1 without speculative decoding,
  // more with it (accepted drafts). Written by the engine, read by the workers' admission; 0
  // until published. See SharedSegment::tokens_per_step().
  std::atomic<uint32_t> engine_tokens_per_step;
  // Admission's margin: written and read by the workers (SharedMargin).
  alignas(64) SharedMargin admission_margin;
  // Why the engine could not start (loading the model or sizing its cache failed): written by
  // that engine just before it exits, read by the supervisor once it has reaped it, cleared by
  // the supervisor before it starts an engine. See SharedSegment::SetEngineFailure.
  alignas(64) uint32_t engine_failure_bytes;
  char engine_failure[kEngineFailureCapacity];
};

// Owns the mapping (and, for the creator, the name until Unlink). Move-only.
class SharedSegment {
 public:
  // A fresh, unique name for this instance: "/gecd-<pid>-<random>".
  static std::string UniqueName();
  static absl::StatusOr<SharedSegment> Create(const std::string& name,
                                              const SegmentOptions& options);
  static absl::StatusOr<SharedSegment> Open(const std::string& name);

  SharedSegment() = default;
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  // Removes the name (the creator, at shutdown); existing mappings stay valid.
  absl::Status Unlink();

  const std::string& name() const { return name_; }
  SegmentHeader* header() const;
  std::span<uint8_t> metrics_region() const;
  // The raw memory of worker `index`'s channel, for ipc::WorkerChannel.
  std::span<uint8_t> channel_region(int index) const;
  // Worker `index`'s channel (validated by Open).
  WorkerChannel channel(int index) const;
  int num_workers() const;
  Doorbell engine_doorbell() const {
    return {&header()->engine_doorbell, &header()->engine_sleeping};
  }

  // Engine, when it cannot start: records `message` (cut to kEngineFailureCapacity bytes) for
  // the supervisor, which reads it with EngineFailure() after the engine exited and clears it
  // with ClearEngineFailure() before starting the next. Not for concurrent use: the engine's
  // exit and the supervisor's waitpid order the two.
  void SetEngineFailure(std::string_view message);
  std::string EngineFailure() const;
  void ClearEngineFailure();

  // Whether the engine has work it should be making steps on: sequences it admitted, or
  // requests waiting in a worker's ring. With engine_steps standing still, a wedged engine.
  bool EngineWorkQueued() const;

  // Engine: publishes what it measured of its steps; workers read it.
  void PublishStepTime(StepTime step_time) const;
  StepTime step_time() const;
  void PublishTokensPerStep(float tokens) const;
  float tokens_per_step() const;  // 0: not published
  // The workers' admission margin.
  SharedMargin* admission_margin() const { return &header()->admission_margin; }
  // The sentences admitted by every worker but `index` (ChannelHeader::admitted).
  int AdmittedByOtherWorkers(int index) const;

  // Supervisor, after worker `index` died and before starting its replacement: has the engine
  // free its sequences and reset its rings (see worker_channel.h).
  void ResetWorkerChannel(int index);

 private:
  static absl::StatusOr<SharedSegment> Map(const std::string& name, int fd, size_t size);

  std::string name_;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::vector<WorkerChannel> channels_;
};

}  // namespace gecd::ipc

#endif  // GECD_IPC_SHARED_SEGMENT_H_
