#include "ipc/worker_channel.h"

#include <new>

#include "common/status_macros.h"

namespace gecd::ipc {
namespace {

constexpr size_t kHeaderBytes = (sizeof(ChannelHeader) + 63) / 64 * 64;

}  // namespace

size_t WorkerChannel::RegionBytes(uint32_t ring_slots, uint32_t ring_slot_bytes) {
  return kHeaderBytes + 2 * Ring::RegionBytes(ring_slots, ring_slot_bytes);
}

absl::StatusOr<WorkerChannel> WorkerChannel::Format(std::span<uint8_t> region, uint32_t ring_slots,
                                                    uint32_t ring_slot_bytes) {
  const size_t ring_bytes = Ring::RegionBytes(ring_slots, ring_slot_bytes);
  if (region.size() < RegionBytes(ring_slots, ring_slot_bytes)) {
    return absl::InvalidArgumentError("worker channel region too small");
  }
  WorkerChannel channel;
  channel.header_ = new (region.data()) ChannelHeader{};
  channel.header_->listening_generation.store(~uint64_t{0});  // no worker listens yet
  ASSIGN_OR_RETURN(channel.requests_, Ring::Format(region.subspan(kHeaderBytes, ring_bytes),
                                                   ring_slots, ring_slot_bytes));
  ASSIGN_OR_RETURN(channel.responses_,
                   Ring::Format(region.subspan(kHeaderBytes + ring_bytes, ring_bytes), ring_slots,
                                ring_slot_bytes));
  return channel;
}

absl::StatusOr<WorkerChannel> WorkerChannel::Attach(std::span<uint8_t> region) {
  if (region.size() < kHeaderBytes) {
    return absl::InvalidArgumentError("worker channel region too small");
  }
  WorkerChannel channel;
  channel.header_ = reinterpret_cast<ChannelHeader*>(region.data());
  ASSIGN_OR_RETURN(channel.requests_, Ring::Attach(region.subspan(kHeaderBytes)));
  const size_t ring_bytes =
      Ring::RegionBytes(channel.requests_.header()->slots, channel.requests_.header()->slot_bytes);
  if (region.size() < kHeaderBytes + 2 * ring_bytes) {
    return absl::InvalidArgumentError("worker channel region too small for its rings");
  }
  ASSIGN_OR_RETURN(channel.responses_, Ring::Attach(region.subspan(kHeaderBytes + ring_bytes)));
  return channel;
}

void WorkerChannel::CompleteReset() {
  requests_.Reset();
  responses_.Reset();
  header_->engine_generation.store(header_->generation.load(std::memory_order_acquire),
                                   std::memory_order_release);
}

}  // namespace gecd::ipc
