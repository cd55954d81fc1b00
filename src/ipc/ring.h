#ifndef GECD_IPC_RING_H_
#define GECD_IPC_RING_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/statusor.h"

// A lock-free single-producer / single-consumer ring of fixed-size slots in shared memory, and
// the futex doorbell a consumer sleeps on. Layout of a ring's region:
//   [RingHeader][slot 0] ... [slot N-1]   each slot: [uint32 length][4 bytes pad][payload]
// The producer owns `tail`, the consumer `head`, each on its own cache line; a slot is
// published by a release store of `tail` and freed by a release store of `head`. Either side
// can die and be replaced: the indices in shared memory are always consistent, and a
// replacement continues from them.
namespace gecd::ipc {

struct RingHeader {
  uint32_t slots;       // power of two
  uint32_t slot_bytes;  // multiple of 64, header included
  alignas(64) std::atomic<uint64_t> tail;
  alignas(64) std::atomic<uint64_t> head;
  // The consumer's doorbell (see Doorbell); unused when the consumer waits elsewhere.
  alignas(64) std::atomic<uint32_t> wake_word;
  std::atomic<uint32_t> consumer_sleeping;
};

struct WaitOptions {
  // Spinning first keeps a busy peer from ever paying a wake-up (about 20 us on these
  // machines); shorter spins let both sides fall asleep and every exchange pays it.
  std::chrono::nanoseconds spin{std::chrono::microseconds(30)};
  std::chrono::nanoseconds timeout{std::chrono::milliseconds(100)};
};

// A futex word plus the flag its one waiter raises before sleeping, so that waking costs a
// system call only when the waiter is actually asleep. Any number of threads or processes may
// Ring(); one waits.
class Doorbell {
 public:
  Doorbell() = default;
  Doorbell(std::atomic<uint32_t>* word, std::atomic<uint32_t>* sleeping)
      : word_(word), sleeping_(sleeping) {}

  // Call after publishing work: wakes the waiter if it is asleep.
  void Ring() const;

  // Returns as soon as ready() is true (spinning for options.spin, then sleeping), or false
  // after options.timeout. ready() must read what Ring() callers publish.
  template <typename Ready>
  bool Wait(Ready&& ready, const WaitOptions& options) const;

 private:
  bool Sleep(std::chrono::nanoseconds timeout, uint32_t seen) const;

  std::atomic<uint32_t>* word_ = nullptr;
  std::atomic<uint32_t>* sleeping_ = nullptr;
};

// A view of one ring's region; copyable, owns nothing.
class Ring {
 public:
  static size_t RegionBytes(uint32_t slots, uint32_t slot_bytes);
  // Writes a fresh header into `region`.
  static absl::StatusOr<Ring> Format(std::span<uint8_t> region, uint32_t slots,
                                     uint32_t slot_bytes);
  // Checks a formatted region (geometry fits it).
  static absl::StatusOr<Ring> Attach(std::span<uint8_t> region);

  Ring() = default;

  // Empties the ring. Only while neither side is using it (its producer died and the consumer
  // is the caller, or at start-up): live producers and consumers keep stale local indices.
  void Reset();

  // The largest message a slot holds.
  size_t max_message_bytes() const { return header_->slot_bytes - kSlotHeaderBytes; }
  RingHeader* header() const { return header_; }
  Doorbell consumer_doorbell() const { return {&header_->wake_word, &header_->consumer_sleeping}; }
  // Whether published messages wait for the consumer: a look from outside either side (the
  // supervisor's watchdog), so it reads both shared indices.
  bool HasUnread() const {
    return header_->tail.load(std::memory_order_acquire) !=
           header_->head.load(std::memory_order_acquire);
  }

 private:
  friend class RingProducer;
  friend class RingConsumer;
  static constexpr size_t kSlotHeaderBytes = 8;

  uint8_t* slot(uint64_t index) const {
    return slots_ + (index & (header_->slots - 1)) * header_->slot_bytes;
  }

  RingHeader* header_ = nullptr;
  uint8_t* slots_ = nullptr;
};

// The writing side. Reserve() a slot, fill it, Commit() it; Publish() makes every committed
// slot visible at once (one store for a batch).
class RingProducer {
 public:
  RingProducer() = default;
  explicit RingProducer(Ring ring);

  // The next free slot's payload, or an empty span when the ring is full.
  std::span<uint8_t> Reserve();
  // Finishes the reserved slot with `bytes` of payload (<= max_message_bytes()).
  void Commit(size_t bytes);
  void Publish() { ring_.header_->tail.store(tail_, std::memory_order_release); }
  // True when the consumer has taken everything published, i.e. it is waiting for work.
  bool ConsumerCaughtUp() const {
    return ring_.header_->head.load(std::memory_order_acquire) ==
           ring_.header_->tail.load(std::memory_order_relaxed);
  }
  const Ring& ring() const { return ring_; }

 private:
  Ring ring_;
  uint64_t tail_ = 0;        // next slot to fill
  uint64_t head_cache_ = 0;  // the consumer's head as last read
};

// The reading side: Peek() the oldest message, Release() it when done with its bytes.
class RingConsumer {
 public:
  RingConsumer() = default;
  explicit RingConsumer(Ring ring);

  // The oldest unread message, or an empty span. Never longer than max_message_bytes() even
  // if the producer wrote a corrupt length.
  std::span<const uint8_t> Peek();
  void Release() { ring_.header_->head.store(++head_, std::memory_order_release); }
  bool HasMessage() const { return ring_.header_->tail.load(std::memory_order_acquire) != head_; }
  const Ring& ring() const { return ring_; }

 private:
  Ring ring_;
  uint64_t head_ = 0;
  uint64_t tail_cache_ = 0;
};

template <typename Ready>
bool Doorbell::Wait(Ready&& ready, const WaitOptions& options) const {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point spin_end = start + options.spin;
  const Clock::time_point deadline = start + options.timeout;
  for (;;) {
    if (ready()) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (now < spin_end) {
      __builtin_ia32_pause();
      continue;
    }
    // Read the word before advertising sleep: a Ring() after the re-check below changes it,
    // so the futex wait returns at once instead of missing the wake-up.
    const uint32_t seen = word_->load(std::memory_order_acquire);
    sleeping_->store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ready()) {
      sleeping_->store(0, std::memory_order_relaxed);
      return true;
    }
    Sleep(deadline - now, seen);
    sleeping_->store(0, std::memory_order_relaxed);
  }
}

}  // namespace gecd::ipc

#endif  // GECD_IPC_RING_H_
