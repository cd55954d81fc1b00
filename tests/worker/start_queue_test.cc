#include "worker/start_queue.h"

#include <chrono>
#include <future>
#include <map>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/mutex.h"
#include "gtest/gtest.h"

namespace gecd::worker {
namespace {

constexpr std::chrono::seconds kWait(10);

// Records what started (in order, and on which thread) and what failed, and how; a start can
// be made to wait until the test opens its gate.
class Sentences {
 public:
  StartQueue::Pending Make(uint64_t id, bool gated = false) {
    return {.id = id,
            .start =
                [this, id, gated] {
                  MutexLock lock(&mu_);
                  started_.push_back(id);
                  threads_.push_back(std::this_thread::get_id());
                  if (gated) mu_.Await([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return open_; });
                },
            .fail =
                [this, id](absl::Status status) {
                  MutexLock lock(&mu_);
                  failed_[id] = status.code();
                }};
  }
  void Open() {
    MutexLock lock(&mu_);
    open_ = true;
  }
  std::vector<uint64_t> started() {
    MutexLock lock(&mu_);
    return started_;
  }
  std::vector<std::thread::id> threads() {
    MutexLock lock(&mu_);
    return threads_;
  }
  std::map<uint64_t, absl::StatusCode> failed() {
    MutexLock lock(&mu_);
    return failed_;
  }
  bool WaitForStarted(size_t n) {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return started_.size() >= n; }, kWait);
  }

 private:
  Mutex mu_;
  std::vector<uint64_t> started_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, absl::StatusCode> failed_ ABSL_GUARDED_BY(mu_);
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

// Sentence 1 starts and runs until the test opens the gate; `ids` queue behind it.
void QueueBehindAGatedStart(StartQueue& queue, Sentences& sentences,
                            const std::vector<uint64_t>& ids) {
  queue.Push(sentences.Make(1, /*gated=*/true));
  ASSERT_TRUE(sentences.WaitForStarted(1));
  for (const uint64_t id : ids) queue.Push(sentences.Make(id));
}

// The point of the queue: Push returns while a start is still running (it would otherwise hold
// the gRPC thread that reads the connection's next call), and starts run in arrival order on
// one thread that is not the caller's.
TEST(StartQueueTest, PushReturnsWhileAStartRunsAndStartsRunInOrderOffTheCallersThread) {
  Sentences sentences;
  StartQueue queue;
  queue.Push(sentences.Make(1, /*gated=*/true));
  ASSERT_TRUE(sentences.WaitForStarted(1));
  auto pushed = std::async(std::launch::async, [&] {
    for (uint64_t id = 2; id <= 4; ++id) queue.Push(sentences.Make(id));
  });
  ASSERT_EQ(pushed.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(queue.queued(), 3u);
  EXPECT_EQ(sentences.started(), (std::vector<uint64_t>{1}));
  sentences.Open();
  ASSERT_TRUE(sentences.WaitForStarted(4));
  EXPECT_EQ(sentences.started(), (std::vector<uint64_t>{1, 2, 3, 4}));
  for (const std::thread::id thread : sentences.threads()) {
    EXPECT_NE(thread, std::this_thread::get_id());
    EXPECT_EQ(thread, sentences.threads().front());
  }
  EXPECT_TRUE(sentences.failed().empty());
}

// With two threads, a second sentence starts while the first still runs.
TEST(StartQueueTest, WithTwoThreadsTwoSentencesStartAtOnce) {
  Sentences sentences;
  StartQueue queue(2);
  queue.Push(sentences.Make(1, /*gated=*/true));
  queue.Push(sentences.Make(2, /*gated=*/true));
  ASSERT_TRUE(sentences.WaitForStarted(2));
  queue.Push(sentences.Make(3));
  EXPECT_EQ(queue.queued(), 1u);
  sentences.Open();
  ASSERT_TRUE(sentences.WaitForStarted(3));
  EXPECT_NE(sentences.threads()[0], sentences.threads()[1]);
  queue.Stop();
  queue.Push(sentences.Make(4));
  EXPECT_EQ(sentences.started().size(), 4u);
}

TEST(StartQueueTest, ACancelledSentenceIsAnsweredOnceAndNeverStarts) {
  Sentences sentences;
  StartQueue queue;
  QueueBehindAGatedStart(queue, sentences, {2, 3});
  EXPECT_TRUE(queue.Cancel(2, absl::DeadlineExceededError("deadline exceeded")));
  // Answered already; started, or unknown: not queued.
  EXPECT_FALSE(queue.Cancel(2, absl::CancelledError("cancelled")));
  EXPECT_FALSE(queue.Cancel(1, absl::CancelledError("cancelled")));
  EXPECT_FALSE(queue.Cancel(99, absl::CancelledError("cancelled")));
  EXPECT_EQ(sentences.failed(),
            (std::map<uint64_t, absl::StatusCode>{{2, absl::StatusCode::kDeadlineExceeded}}));
  sentences.Open();
  ASSERT_TRUE(sentences.WaitForStarted(2));
  EXPECT_EQ(sentences.started(), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(queue.queued(), 0u);
}

// Nothing queued is lost at shutdown: Stop starts it all first; a sentence pushed afterwards
// starts on the caller's thread.
TEST(StartQueueTest, StopStartsWhatIsQueuedAndLaterPushesStartInline) {
  Sentences sentences;
  StartQueue queue;
  QueueBehindAGatedStart(queue, sentences, {2, 3});
  auto stopped = std::async(std::launch::async, [&] { queue.Stop(); });
  EXPECT_EQ(stopped.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  sentences.Open();
  ASSERT_EQ(stopped.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(sentences.started(), (std::vector<uint64_t>{1, 2, 3}));
  queue.Push(sentences.Make(4));
  EXPECT_EQ(sentences.started(), (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(sentences.threads().back(), std::this_thread::get_id());
  queue.Stop();  // again: nothing to do
}

}  // namespace
}  // namespace gecd::worker
