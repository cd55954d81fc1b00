#include "common/pending_callbacks.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gecd {
namespace {

TEST(PendingCallbacksTest, CountsTokensUntilTheirLastCopyIsDestroyed) {
  PendingCallbacks pending;
  EXPECT_EQ(pending.pending(), 0);
  {
    PendingCallbacks::Token a = pending.Start();
    std::function<void()> callback = [token = pending.Start()] {};
    std::function<void()> copy = callback;
    EXPECT_EQ(pending.pending(), 2);
    callback = nullptr;
    EXPECT_EQ(pending.pending(), 2);  // the copy still holds it
    copy = nullptr;
    EXPECT_EQ(pending.pending(), 1);
  }
  EXPECT_EQ(pending.pending(), 0);
  pending.WaitForNone();  // none: returns at once
}

TEST(PendingCallbacksTest, WaitForNoneReturnsOnlyAfterEveryCallbackRanOnItsThread) {
  auto pending = std::make_unique<PendingCallbacks>();
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&ran, token = pending->Start()]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ran.fetch_add(1);
      token.reset();
    });
  }
  pending->WaitForNone();
  EXPECT_EQ(ran.load(), 4);
  pending.reset();  // what an owner's destructor does next; ThreadSanitizer checks the order
  for (std::thread& thread : threads) thread.join();
}

}  // namespace
}  // namespace gecd
