#include "ipc/ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace gecd::ipc {
namespace {

constexpr size_t kHeaderBytes = (sizeof(RingHeader) + 63) / 64 * 64;

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: waiter and waker are usually different processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

absl::Status CheckGeometry(uint32_t slots, uint32_t slot_bytes) {
  if (slots < 2 || (slots & (slots - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring slots must be a power of two >= 2, got ", slots));
  }
  if (slot_bytes < 64 || slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring slot bytes must be a multiple of 64, got ", slot_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

void Doorbell::Ring() const {
  // Pairs with the fence in Wait(): either the waiter's re-check sees what was published
  // before this call, or this load sees its sleeping flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping_->load(std::memory_order_relaxed) == 0) return;
  word_->fetch_add(1, std::memory_order_release);
  Futex(word_, FUTEX_WAKE, INT_MAX, nullptr);
}

bool Doorbell::Sleep(std::chrono::nanoseconds timeout, uint32_t seen) const {
  timespec ts;
  ts.tv_sec = timeout.count() / 1'000'000'000;
  ts.tv_nsec = timeout.count() % 1'000'000'000;
  return Futex(word_, FUTEX_WAIT, seen, &ts) == 0;
}

size_t Ring::RegionBytes(uint32_t slots, uint32_t slot_bytes) {
  return kHeaderBytes + static_cast<size_t>(slots) * slot_bytes;
}

absl::StatusOr<Ring> Ring::Format(std::span<uint8_t> region, uint32_t slots, uint32_t slot_bytes) {
  if (absl::Status s = CheckGeometry(slots, slot_bytes); !s.ok()) return s;
  if (region.size() < RegionBytes(slots, slot_bytes)) {
    return absl::InvalidArgumentError("ring region too small for its slots");
  }
  Ring ring;
  ring.header_ = new (region.data()) RingHeader{};
  ring.header_->slots = slots;
  ring.header_->slot_bytes = slot_bytes;
  ring.slots_ = region.data() + kHeaderBytes;
  return ring;
}

absl::StatusOr<Ring> Ring::Attach(std::span<uint8_t> region) {
  if (region.size() < kHeaderBytes) return absl::InvalidArgumentError("ring region too small");
  auto* header = reinterpret_cast<RingHeader*>(region.data());
  if (absl::Status s = CheckGeometry(header->slots, header->slot_bytes); !s.ok()) return s;
  if (region.size() < RegionBytes(header->slots, header->slot_bytes)) {
    return absl::InvalidArgumentError("ring region smaller than its header says");
  }
  Ring ring;
  ring.header_ = header;
  ring.slots_ = region.data() + kHeaderBytes;
  return ring;
}

void Ring::Reset() {
  header_->head.store(0, std::memory_order_relaxed);
  header_->tail.store(0, std::memory_order_relaxed);
  header_->consumer_sleeping.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

RingProducer::RingProducer(Ring ring)
    : ring_(ring),
      tail_(ring.header_->tail.load(std::memory_order_relaxed)),
      head_cache_(ring.header_->head.load(std::memory_order_acquire)) {}

std::span<uint8_t> RingProducer::Reserve() {
  const uint32_t slots = ring_.header_->slots;
  if (tail_ - head_cache_ >= slots) {
    head_cache_ = ring_.header_->head.load(std::memory_order_acquire);
    if (tail_ - head_cache_ >= slots) return {};
  }
  return {ring_.slot(tail_) + Ring::kSlotHeaderBytes, ring_.max_message_bytes()};
}

void RingProducer::Commit(size_t bytes) {
  const uint32_t length = static_cast<uint32_t>(bytes);
  std::memcpy(ring_.slot(tail_), &length, sizeof(length));
  ++tail_;
}

RingConsumer::RingConsumer(Ring ring)
    : ring_(ring),
      head_(ring.header_->head.load(std::memory_order_relaxed)),
      tail_cache_(ring.header_->tail.load(std::memory_order_acquire)) {}

std::span<const uint8_t> RingConsumer::Peek() {
  if (head_ == tail_cache_) {
    tail_cache_ = ring_.header_->tail.load(std::memory_order_acquire);
    if (head_ == tail_cache_) return {};
  }
  const uint8_t* slot = ring_.slot(head_);
  uint32_t length;
  std::memcpy(&length, slot, sizeof(length));
  const size_t bytes = std::min<size_t>(length, ring_.max_message_bytes());
  return {slot + Ring::kSlotHeaderBytes, bytes};
}

}  // namespace gecd::ipc
