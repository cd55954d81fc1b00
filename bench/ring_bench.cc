// Shared-memory ring throughput and wake-up latency (ipc/ring.h). Producer and consumer are
// two threads over one region (the same code runs across processes; only the mapping differs).

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "benchmark/benchmark.h"
#include "ipc/ring.h"
#include "testing/ring_memory.h"

namespace gecd::ipc {
namespace {

using gecd::testing::RingMemory;

// One thread: reserve, commit, publish, peek, release. The cost of the operations alone.
void BM_RingSingleThread(benchmark::State& state) {
  RingMemory memory(1024, 64);
  RingProducer producer(memory.ring());
  RingConsumer consumer(memory.ring());
  uint64_t value = 0;
  for (auto _ : state) {
    std::span<uint8_t> slot = producer.Reserve();
    std::memcpy(slot.data(), &value, sizeof(value));
    producer.Commit(sizeof(value));
    producer.Publish();
    benchmark::DoNotOptimize(consumer.Peek().data());
    consumer.Release();
    ++value;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RingSingleThread);

// Producer (the benchmark thread) and a busy-polling consumer thread; the producer publishes
// every `range(0)` messages.
void BM_RingTwoThreads(benchmark::State& state) {
  const int64_t batch = state.range(0);
  RingMemory memory(1024, 64);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> received{0};
  std::thread consumer_thread([&] {
    RingConsumer consumer(memory.ring());
    uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      for (std::span<const uint8_t> m = consumer.Peek(); !m.empty(); m = consumer.Peek()) {
        benchmark::DoNotOptimize(m[0]);
        consumer.Release();
        ++n;
      }
    }
    received = n;
  });
  RingProducer producer(memory.ring());
  int64_t pending = 0;
  uint64_t value = 0;
  for (auto _ : state) {
    std::span<uint8_t> slot;
    while ((slot = producer.Reserve()).empty()) producer.Publish();
    std::memcpy(slot.data(), &value, sizeof(value));
    producer.Commit(sizeof(value));
    if (++pending == batch) {
      producer.Publish();
      pending = 0;
    }
    ++value;
  }
  producer.Publish();
  stop = true;
  consumer_thread.join();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RingTwoThreads)->Arg(1)->Arg(32)->UseRealTime();

// Round trip: ping on one ring, the echo thread answers on another; both sides wait with the
// doorbell. range(0) = spin before sleeping, in microseconds (0: always sleep), range(1) = the
// pause between round trips in microseconds (long pauses let the vCPU go idle).
void BM_RingPingPong(benchmark::State& state) {
  const WaitOptions wait{.spin = std::chrono::microseconds(state.range(0)),
                         .timeout = std::chrono::seconds(10)};
  const auto pause = std::chrono::microseconds(state.range(1));
  RingMemory ping(64, 64), pong(64, 64);
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    RingConsumer in(ping.ring());
    RingProducer out(pong.ring());
    const Doorbell in_bell = ping.ring().consumer_doorbell();
    const Doorbell out_bell = pong.ring().consumer_doorbell();
    while (!stop.load(std::memory_order_relaxed)) {
      if (!in_bell.Wait([&] { return in.HasMessage() || stop.load(std::memory_order_relaxed); },
                        wait)) {
        continue;
      }
      while (!in.Peek().empty()) {
        in.Release();
        out.Reserve();
        out.Commit(8);
        out.Publish();
        out_bell.Ring();
      }
    }
  });
  RingProducer out(ping.ring());
  RingConsumer in(pong.ring());
  const Doorbell out_bell = ping.ring().consumer_doorbell();
  const Doorbell in_bell = pong.ring().consumer_doorbell();
  for (auto _ : state) {
    out.Reserve();
    out.Commit(8);
    out.Publish();
    out_bell.Ring();
    if (!in_bell.Wait([&] { return in.HasMessage(); }, wait)) {
      state.SkipWithError("no answer within 10 s");
      break;
    }
    in.Peek();
    in.Release();
    if (pause.count() > 0) {
      state.PauseTiming();
      std::this_thread::sleep_for(pause);
      state.ResumeTiming();
    }
  }
  stop = true;
  out_bell.Ring();
  echo.join();
}
BENCHMARK(BM_RingPingPong)
    ->ArgNames({"spin_us", "pause_us"})
    ->Args({50, 0})
    ->Args({0, 0})
    ->Args({50, 1000})
    ->Args({0, 1000})
    ->UseRealTime();

}  // namespace
}  // namespace gecd::ipc

BENCHMARK_MAIN();
