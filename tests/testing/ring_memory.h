#ifndef GECD_TESTS_TESTING_RING_MEMORY_H_
#define GECD_TESTS_TESTING_RING_MEMORY_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "ipc/ring.h"

namespace gecd::testing {

// A 64-byte aligned heap region holding one formatted ring, for ring tests and benchmarks that
// need no shared memory (the ring code is the same across processes; only the mapping differs).
class RingMemory {
 public:
  RingMemory(uint32_t slots, uint32_t slot_bytes)
      : size_(ipc::Ring::RegionBytes(slots, slot_bytes)),
        memory_(static_cast<uint8_t*>(std::aligned_alloc(64, size_)), &std::free),
        ring_(*ipc::Ring::Format({memory_.get(), size_}, slots, slot_bytes)) {}

  const ipc::Ring& ring() const { return ring_; }
  std::span<uint8_t> region() { return {memory_.get(), size_}; }

 private:
  size_t size_;
  std::unique_ptr<uint8_t, decltype(&std::free)> memory_;
  ipc::Ring ring_;
};

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_RING_MEMORY_H_
