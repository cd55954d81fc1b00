#include "worker/waiting_room.h"

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/mutex.h"
#include "gtest/gtest.h"

namespace gecd::worker {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kWait(10'000);

// Room for `room` sentences at a time, handed out by the test; records what started and what
// failed, and how.
class Sentences {
 public:
  WaitingRoom::Waiting Make(uint64_t id) {
    return {.id = id,
            .try_start =
                [this, id] {
                  MutexLock lock(&mu_);
                  if (room_ == 0) return false;
                  --room_;
                  started_.push_back(id);
                  return true;
                },
            .fail =
                [this, id](absl::Status status) {
                  MutexLock lock(&mu_);
                  failed_[id] = status.code();
                }};
  }
  void AddRoom(int n) {
    MutexLock lock(&mu_);
    room_ += n;
  }
  std::vector<uint64_t> started() {
    MutexLock lock(&mu_);
    return started_;
  }
  std::map<uint64_t, absl::StatusCode> failed() {
    MutexLock lock(&mu_);
    return failed_;
  }
  // Polls until `done` holds.
  bool WaitFor(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(2));
    }
    return true;
  }

 private:
  Mutex mu_;
  int room_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> started_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, absl::StatusCode> failed_ ABSL_GUARDED_BY(mu_);
};

TEST(WaitingRoomTest, StartsInArrivalOrderAsRoomAppears) {
  Sentences s;
  WaitingRoom queue(10, milliseconds(10'000));  // only pokes, not the periodic retry
  for (uint64_t id = 1; id <= 4; ++id) queue.Push(s.Make(id));
  ASSERT_TRUE(s.WaitFor([&] { return queue.waiting() == 4; }));
  s.AddRoom(2);
  queue.Poke();
  ASSERT_TRUE(s.WaitFor([&] { return s.started().size() == 2; }));
  EXPECT_EQ(s.started(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(queue.waiting(), 2u);
  s.AddRoom(5);
  queue.Poke();
  ASSERT_TRUE(s.WaitFor([&] { return s.started().size() == 4; }));
  EXPECT_EQ(s.started(), (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_TRUE(s.failed().empty());
}

TEST(WaitingRoomTest, RetriesWithoutAPoke) {
  Sentences s;
  WaitingRoom queue(10, milliseconds(5));
  queue.Push(s.Make(1));
  ASSERT_TRUE(s.WaitFor([&] { return queue.waiting() == 1; }));
  s.AddRoom(1);  // nobody pokes: the periodic retry finds it
  ASSERT_TRUE(s.WaitFor([&] { return s.started().size() == 1; }));
}

TEST(WaitingRoomTest, ACancelledSentenceLeavesAndIsAnsweredOnce) {
  Sentences s;
  WaitingRoom queue(10, milliseconds(10'000));
  queue.Push(s.Make(1));
  queue.Push(s.Make(2));
  ASSERT_TRUE(s.WaitFor([&] { return queue.waiting() == 2; }));
  EXPECT_TRUE(queue.Cancel(1, absl::DeadlineExceededError("deadline exceeded")));
  EXPECT_FALSE(queue.Cancel(1, absl::CancelledError("again")));  // already answered
  EXPECT_FALSE(queue.Cancel(99, absl::CancelledError("unknown")));
  EXPECT_EQ(s.failed(),
            (std::map<uint64_t, absl::StatusCode>{{1, absl::StatusCode::kDeadlineExceeded}}));
  s.AddRoom(1);
  queue.Poke();
  ASSERT_TRUE(s.WaitFor([&] { return s.started().size() == 1; }));
  EXPECT_EQ(s.started(), std::vector<uint64_t>{2});
}

TEST(WaitingRoomTest, AFullRoomRefusesTheNewcomer) {
  Sentences s;
  WaitingRoom queue(2, milliseconds(10'000));
  for (uint64_t id = 1; id <= 3; ++id) queue.Push(s.Make(id));
  ASSERT_TRUE(s.WaitFor([&] { return !s.failed().empty(); }));
  EXPECT_EQ(s.failed(),
            (std::map<uint64_t, absl::StatusCode>{{3, absl::StatusCode::kResourceExhausted}}));
  EXPECT_EQ(queue.waiting(), 2u);
}

TEST(WaitingRoomTest, ClosingFailsWhatWaitsAndWhatComes) {
  Sentences s;
  auto queue = std::make_unique<WaitingRoom>(10, milliseconds(10'000));
  queue->Push(s.Make(1));
  queue->Push(s.Make(2));
  queue->Close(absl::UnavailableError("server is shutting down"));
  queue->Push(s.Make(3));
  s.AddRoom(10);
  queue->Poke();
  ASSERT_TRUE(s.WaitFor([&] { return s.failed().size() == 3; }));
  EXPECT_TRUE(s.started().empty());
  for (const auto& [id, code] : s.failed()) EXPECT_EQ(code, absl::StatusCode::kUnavailable) << id;
  queue.reset();  // joins
}

TEST(WaitingRoomTest, DestroyingTheQueueAnswersWhatWaits) {
  Sentences s;
  {
    WaitingRoom queue(10, milliseconds(10'000));
    queue.Push(s.Make(1));
  }
  EXPECT_EQ(s.failed(),
            (std::map<uint64_t, absl::StatusCode>{{1, absl::StatusCode::kUnavailable}}));
}

}  // namespace
}  // namespace gecd::worker
