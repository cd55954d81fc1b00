#include "ipc/ring.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "ipc/shared_segment.h"
#include "testing/ring_memory.h"

namespace gecd::ipc {
namespace {

using gecd::testing::RingMemory;

void Put(RingProducer& producer, uint64_t value) {
  std::span<uint8_t> slot = producer.Reserve();
  ASSERT_GE(slot.size(), sizeof(value));
  std::memcpy(slot.data(), &value, sizeof(value));
  producer.Commit(sizeof(value));
}

uint64_t Take(RingConsumer& consumer) {
  std::span<const uint8_t> message = consumer.Peek();
  EXPECT_EQ(message.size(), sizeof(uint64_t));
  uint64_t value = 0;
  std::memcpy(&value, message.data(), std::min(message.size(), sizeof(value)));
  consumer.Release();
  return value;
}

TEST(RingTest, FormatRejectsBadGeometry) {
  alignas(64) uint8_t region[8192];
  EXPECT_FALSE(Ring::Format(region, 3, 64).ok());
  EXPECT_FALSE(Ring::Format(region, 4, 100).ok());
  EXPECT_FALSE(Ring::Format(region, 1024, 64).ok());  // region too small
  EXPECT_TRUE(Ring::Format(region, 4, 64).ok());
}

TEST(RingTest, AttachValidatesTheHeader) {
  RingMemory memory(4, 128);
  ASSERT_TRUE(Ring::Attach(memory.region()).ok());
  EXPECT_EQ(Ring::Attach(memory.region())->max_message_bytes(), 120u);
  memory.ring().header()->slots = 5;
  EXPECT_FALSE(Ring::Attach(memory.region()).ok());
}

TEST(RingTest, MessagesBecomeVisibleOnPublishInOrder) {
  RingMemory memory(8, 64);
  RingProducer producer(memory.ring());
  RingConsumer consumer(memory.ring());
  EXPECT_TRUE(consumer.Peek().empty());
  EXPECT_TRUE(producer.ConsumerCaughtUp());
  Put(producer, 1);
  Put(producer, 2);
  EXPECT_FALSE(consumer.HasMessage()) << "committed but not published";
  EXPECT_FALSE(memory.ring().HasUnread());
  producer.Publish();
  EXPECT_FALSE(producer.ConsumerCaughtUp());
  ASSERT_TRUE(consumer.HasMessage());
  EXPECT_TRUE(memory.ring().HasUnread()) << "seen from outside either side";
  EXPECT_EQ(Take(consumer), 1u);
  EXPECT_TRUE(memory.ring().HasUnread());
  EXPECT_EQ(Take(consumer), 2u);
  EXPECT_FALSE(memory.ring().HasUnread());
  EXPECT_TRUE(consumer.Peek().empty());
  EXPECT_TRUE(producer.ConsumerCaughtUp());
}

TEST(RingTest, FullRingRefusesUntilTheConsumerReleases) {
  RingMemory memory(4, 64);
  RingProducer producer(memory.ring());
  RingConsumer consumer(memory.ring());
  for (uint64_t i = 0; i < 4; ++i) Put(producer, i);
  producer.Publish();
  EXPECT_TRUE(producer.Reserve().empty());
  EXPECT_EQ(Take(consumer), 0u);
  EXPECT_FALSE(producer.Reserve().empty());
  Put(producer, 4);
  producer.Publish();
  for (uint64_t i = 1; i <= 4; ++i) EXPECT_EQ(Take(consumer), i);
}

TEST(RingTest, WrapsAroundManyTimesWithVaryingLengths) {
  RingMemory memory(4, 128);
  RingProducer producer(memory.ring());
  RingConsumer consumer(memory.ring());
  for (int i = 0; i < 1000; ++i) {
    const size_t length = i % 121;
    std::span<uint8_t> slot = producer.Reserve();
    ASSERT_EQ(slot.size(), 120u);
    std::memset(slot.data(), i & 0xff, length);
    producer.Commit(length);
    producer.Publish();
    std::span<const uint8_t> message = consumer.Peek();
    ASSERT_EQ(message.size(), length);
    for (uint8_t byte : message) ASSERT_EQ(byte, i & 0xff);
    consumer.Release();
  }
}

TEST(RingTest, CorruptLengthIsClampedToTheSlot) {
  RingMemory memory(4, 64);
  RingProducer producer(memory.ring());
  RingConsumer consumer(memory.ring());
  producer.Reserve();
  producer.Commit(100000);
  producer.Publish();
  EXPECT_EQ(consumer.Peek().size(), memory.ring().max_message_bytes());
}

TEST(RingTest, ResetEmptiesAndAReplacementContinues) {
  RingMemory memory(4, 64);
  {
    RingProducer producer(memory.ring());
    Put(producer, 7);
    Put(producer, 8);
    producer.Publish();
  }
  // A producer that replaces a dead one continues from the published tail.
  RingProducer replacement(memory.ring());
  Put(replacement, 9);
  replacement.Publish();
  RingConsumer consumer(memory.ring());
  EXPECT_EQ(Take(consumer), 7u);
  EXPECT_EQ(Take(consumer), 8u);
  EXPECT_EQ(Take(consumer), 9u);

  Put(replacement, 10);
  replacement.Publish();
  Ring ring = memory.ring();
  ring.Reset();
  RingConsumer fresh_consumer(ring);
  RingProducer fresh_producer(ring);
  EXPECT_TRUE(fresh_consumer.Peek().empty());
  for (uint64_t i = 0; i < 4; ++i) Put(fresh_producer, i);  // the whole capacity is free
  fresh_producer.Publish();
  EXPECT_EQ(Take(fresh_consumer), 0u);
}

TEST(DoorbellTest, WaitTimesOutWhenNothingArrives) {
  RingMemory memory(4, 64);
  RingConsumer consumer(memory.ring());
  const WaitOptions options{.spin = std::chrono::microseconds(10),
                            .timeout = std::chrono::milliseconds(5)};
  EXPECT_FALSE(
      memory.ring().consumer_doorbell().Wait([&] { return consumer.HasMessage(); }, options));
}

TEST(DoorbellTest, RingWakesASleepingWaiter) {
  RingMemory memory(4, 64);
  RingConsumer consumer(memory.ring());
  RingProducer producer(memory.ring());
  bool woke = false;
  std::thread waiter([&] {
    const WaitOptions options{.spin = std::chrono::nanoseconds(0),
                              .timeout = std::chrono::seconds(60)};
    woke = memory.ring().consumer_doorbell().Wait([&] { return consumer.HasMessage(); }, options);
  });
  // Publish only once the waiter has gone to sleep, so the futex path is what is tested.
  while (memory.ring().header()->consumer_sleeping.load() == 0) std::this_thread::yield();
  Put(producer, 1);
  producer.Publish();
  memory.ring().consumer_doorbell().Ring();
  waiter.join();
  EXPECT_TRUE(woke);
}

// Producer and consumer on two threads; the consumer sleeps on the doorbell whenever the ring
// is empty, the producer publishes in bursts of varying size.
TEST(RingTest, TwoThreadsMillionMessagesInOrder) {
  constexpr uint64_t kMessages = 1'000'000;
  RingMemory memory(256, 64);
  const Doorbell doorbell = memory.ring().consumer_doorbell();
  std::thread producer_thread([&] {
    RingProducer producer(memory.ring());
    uint64_t burst = 0;
    for (uint64_t i = 0; i < kMessages; ++i) {
      std::span<uint8_t> slot;
      while ((slot = producer.Reserve()).empty()) {
        producer.Publish();
        doorbell.Ring();
        std::this_thread::yield();
      }
      std::memcpy(slot.data(), &i, sizeof(i));
      producer.Commit(sizeof(i));
      if (++burst == (i % 37) + 1) {
        producer.Publish();
        doorbell.Ring();
        burst = 0;
      }
    }
    producer.Publish();
    doorbell.Ring();
  });
  RingConsumer consumer(memory.ring());
  const WaitOptions options{.spin = std::chrono::microseconds(20),
                            .timeout = std::chrono::seconds(60)};
  uint64_t expected = 0;
  while (expected < kMessages) {
    ASSERT_TRUE(doorbell.Wait([&] { return consumer.HasMessage(); }, options));
    for (std::span<const uint8_t> m = consumer.Peek(); !m.empty(); m = consumer.Peek()) {
      uint64_t value;
      ASSERT_EQ(m.size(), sizeof(value));
      std::memcpy(&value, m.data(), sizeof(value));
      ASSERT_EQ(value, expected);
      ++expected;
      consumer.Release();
    }
  }
  producer_thread.join();
  EXPECT_TRUE(consumer.Peek().empty());
}

// The same across two processes sharing a segment: the child produces into worker 0's request
// ring and rings the engine doorbell, as a worker does.
TEST(RingTest, TwoProcessesThroughTheSharedSegment) {
  constexpr uint64_t kMessages = 200'000;
  const std::string name = SharedSegment::UniqueName();
  absl::StatusOr<SharedSegment> segment =
      SharedSegment::Create(name, {.num_workers = 1, .ring_slots = 64, .ring_slot_bytes = 64});
  ASSERT_TRUE(segment.ok()) << segment.status();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<SharedSegment> mine = SharedSegment::Open(name);
    if (!mine.ok()) _exit(2);
    RingProducer producer(mine->channel(0).requests());
    const Doorbell doorbell = mine->engine_doorbell();
    for (uint64_t i = 0; i < kMessages; ++i) {
      std::span<uint8_t> slot;
      while ((slot = producer.Reserve()).empty()) sched_yield();
      std::memcpy(slot.data(), &i, sizeof(i));
      producer.Commit(sizeof(i));
      producer.Publish();
      doorbell.Ring();
    }
    _exit(0);
  }
  RingConsumer consumer(segment->channel(0).requests());
  const WaitOptions options{.spin = std::chrono::microseconds(20),
                            .timeout = std::chrono::seconds(60)};
  uint64_t expected = 0;
  while (expected < kMessages) {
    ASSERT_TRUE(segment->engine_doorbell().Wait([&] { return consumer.HasMessage(); }, options));
    while (consumer.HasMessage()) ASSERT_EQ(Take(consumer), expected++);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(segment->Unlink().ok());
}

}  // namespace
}  // namespace gecd::ipc
