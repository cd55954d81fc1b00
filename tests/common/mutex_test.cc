#include "common/mutex.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace gecd {
namespace {

using std::chrono::milliseconds;

TEST(MutexTest, AwaitWakesWhenAnotherThreadUnlocksWithTheConditionTrue) {
  Mutex mu;
  bool ready = false;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(20));
    MutexLock lock(&mu);
    ready = true;  // no signal: the unlock re-checks the waiter's condition
  });
  mu.Lock();
  EXPECT_TRUE(mu.AwaitWithTimeout(&ready, std::chrono::seconds(30)));
  mu.Unlock();
  setter.join();
}

// A thread that changes the data and then awaits releases the lock without Unlock(): the other
// awaiters re-check then too (a queue's test found a waiter woken only by its timeout).
TEST(MutexTest, AwaitWakesWhenAnotherThreadChangesTheDataAndAwaits) {
  Mutex mu;
  bool started = false, answered = false;
  std::thread starter([&] {
    MutexLock lock(&mu);
    started = true;
    // Without the re-check, the main thread wakes only once this gives up.
    EXPECT_TRUE(mu.AwaitWithTimeout(&answered, std::chrono::seconds(10)));
  });
  mu.Lock();
  mu.Await([&] { return started; });
  answered = true;
  mu.Unlock();
  starter.join();
}

TEST(MutexTest, AwaitWithTimeoutGivesUpAndSaysSo) {
  Mutex mu;
  bool never = false;
  mu.Lock();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(mu.AwaitWithTimeout(&never, milliseconds(30)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(30));
  EXPECT_FALSE(mu.AwaitWithTimeout(&never, milliseconds(-5)));  // already past
  mu.Unlock();
}

TEST(MutexTest, AwaitTakesAPredicate) {
  Mutex mu;
  int count = 0;
  std::thread adder([&] {
    for (int i = 0; i < 5; ++i) {
      MutexLock lock(&mu);
      ++count;
    }
  });
  mu.Lock();
  mu.Await([&] { return count == 5; });
  EXPECT_EQ(count, 5);
  mu.Unlock();
  adder.join();
}

TEST(MutexTest, CondVarWaitsForASignalOrItsTimeout) {
  Mutex mu;
  CondVar cv;
  bool go = false;
  mu.Lock();
  EXPECT_TRUE(cv.WaitWithTimeout(&mu, milliseconds(10)));  // nobody signals: timed out
  std::thread signaller([&] {
    MutexLock lock(&mu);
    go = true;
    cv.SignalAll();
  });
  while (!go) cv.Wait(&mu);
  mu.Unlock();
  signaller.join();
}

TEST(MutexTest, ReleasableMutexLockReleasesOnce) {
  Mutex mu;
  {
    ReleasableMutexLock lock(&mu);
    lock.Release();
    mu.Lock();  // free again
    mu.Unlock();
  }
  MutexLock again(&mu);  // the destructor did not unlock a second time
}

}  // namespace
}  // namespace gecd
