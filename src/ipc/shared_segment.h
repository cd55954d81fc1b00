#ifndef GECD_IPC_SHARED_SEGMENT_H_
#define GECD_IPC_SHARED_SEGMENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"

// One POSIX shared-memory segment per server instance (shm_open, mode 0600), created by the
// supervisor and mapped by every child. Layout, each part 64-byte aligned:
//   [SegmentHeader][metrics region][worker channel 0] ... [worker channel N-1]
// A worker channel holds that worker's request ring (worker -> engine) and response ring
// (engine -> worker); see ring.h. The supervisor unlinks the name at shutdown; the mapping
// lives until the last process unmaps it.
namespace gecd::ipc {

struct SegmentOptions {
  int num_workers = 1;
  uint32_t ring_slots = 1024;      // power of two
  uint32_t ring_slot_bytes = 4096;
  size_t metrics_bytes = 0;        // reserved for server::Metrics
};

// Shared state every process reads. Written only as noted.
struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t num_workers;
  uint64_t total_bytes;
  // Bumped by the supervisor before it starts an engine; workers fail requests of an older
  // epoch with UNAVAILABLE.
  alignas(64) std::atomic<uint64_t> engine_epoch;
  // Set by the engine (to its epoch) once its model is loaded and warmed up; cleared by the
  // supervisor when the engine dies.
  std::atomic<uint64_t> engine_ready_epoch;
  // Set by the supervisor on SIGTERM: workers stop accepting, the engine drains.
  std::atomic<uint32_t> draining;
  // The engine's doorbell: workers bump it after posting to a request ring, and futex-wake it
  // when engine_sleeping is set.
  alignas(64) std::atomic<uint32_t> engine_doorbell;
  std::atomic<uint32_t> engine_sleeping;
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
  int num_workers() const;

 private:
  std::string name_;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
};

}  // namespace gecd::ipc

#endif  // GECD_IPC_SHARED_SEGMENT_H_
