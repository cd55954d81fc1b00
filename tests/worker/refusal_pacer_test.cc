#include "worker/refusal_pacer.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::worker {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Polls until `n` answers came; false after 10 s.
bool WaitForAnswers(const std::atomic<int>& answered, int n) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (answered.load() < n) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(RefusalPacerTest, ABurstGoesAtOnceAndTheRestOneIntervalApart) {
  // 100 a second after a burst of 5: of 25 refusals made at once, 5 are answered inline, the
  // other 20 over the next ~200 ms.
  RefusalPacer pacer({.max_per_second = 100, .burst = 5});
  std::atomic<int> answered{0};
  std::vector<Clock::time_point> when(25);
  const Clock::time_point start = Clock::now();
  int inline_answers = 0;
  for (int i = 0; i < 25; ++i) {
    const int before = answered.load();
    pacer.Refuse([&, i] {
      when[i] = Clock::now();
      answered.fetch_add(1);
    });
    if (answered.load() > before) ++inline_answers;
  }
  EXPECT_EQ(inline_answers, 5);
  ASSERT_TRUE(WaitForAnswers(answered, 25));
  EXPECT_GE(when[24] - start, milliseconds(180));
  EXPECT_LT(when[24] - start, milliseconds(2000));  // a loaded machine, but not a stall
  for (int i = 6; i < 25; ++i) EXPECT_GE(when[i], when[i - 1]) << i;  // in order
  EXPECT_EQ(pacer.waiting(), 0u);
}

TEST(RefusalPacerTest, BelowTheRateNothingWaits) {
  RefusalPacer pacer({.max_per_second = 1000, .burst = 10});
  std::atomic<int> answered{0};
  for (int i = 0; i < 20; ++i) {
    pacer.Refuse([&] { answered.fetch_add(1); });
    EXPECT_EQ(answered.load(), i + 1);  // answered inline
    std::this_thread::sleep_for(milliseconds(2));
  }
}

// With an allowance per admitted call, the calls the worker admits set how many refusals go at
// once: the floor with none admitted, 4 per admitted call a second, the maximum at most, and
// the admissions of seconds ago count for little.
TEST(RefusalPacerTest, TheAllowanceFollowsTheAdmittedCalls) {
  RefusalPacer pacer(
      {.max_per_second = 1000, .burst = 5, .per_admitted = 4, .floor_per_second = 10});
  EXPECT_DOUBLE_EQ(pacer.allowance(), 10);
  for (int i = 0; i < 100; ++i) pacer.Admitted();  // ~100 a second over the last second
  EXPECT_GT(pacer.allowance(), 350);
  EXPECT_LE(pacer.allowance(), 400);
  for (int i = 0; i < 1000; ++i) pacer.Admitted();
  EXPECT_DOUBLE_EQ(pacer.allowance(), 1000);
  std::this_thread::sleep_for(milliseconds(4500));
  EXPECT_LT(pacer.allowance(), 100);  // 4 x 1,100 x e^-4.5 = 49, and less the later it runs
}

TEST(RefusalPacerTest, RefusalsGoAsFastAsTheAdmittedCallsAllow) {
  // The same 25 refusals after a burst of 5: with nothing admitted, one every 100 ms (the
  // floor); with 1,000 admitted a second, all within a few ms.
  const auto last_answer = [](RefusalPacer& pacer) {
    std::atomic<int> answered{0};
    const Clock::time_point start = Clock::now();
    Clock::time_point last;
    for (int i = 0; i < 25; ++i) {
      pacer.Refuse([&] {
        last = Clock::now();
        answered.fetch_add(1);
      });
    }
    EXPECT_TRUE(WaitForAnswers(answered, 25));
    return last - start;
  };
  RefusalPacer idle(
      {.max_per_second = 1000, .burst = 5, .per_admitted = 4, .floor_per_second = 10});
  EXPECT_GE(last_answer(idle), milliseconds(1800));
  RefusalPacer busy(
      {.max_per_second = 1000, .burst = 5, .per_admitted = 4, .floor_per_second = 10});
  for (int i = 0; i < 1000; ++i) busy.Admitted();
  EXPECT_LT(last_answer(busy), milliseconds(1000));
}

// Outside a storm a refusal beyond the allowance waits at most max_wait: an open loop's calls
// come whatever the pacer does, and holding theirs for the allowance made them wait seconds.
TEST(RefusalPacerTest, OutsideAStormARefusalWaitsAtMostMaxWait) {
  // One a second after a burst of 1: paced by the allowance alone, the fifth of five refusals
  // made 20 ms apart would wait ~4 s.
  RefusalPacer pacer({.max_per_second = 1,
                      .burst = 1,
                      .max_wait = std::chrono::microseconds(milliseconds(20)),
                      .storm_held = 16});
  std::atomic<int> answered{0};
  std::vector<Clock::duration> waited(5);
  for (int i = 0; i < 5; ++i) {
    const Clock::time_point sent = Clock::now();
    pacer.Refuse([&, i, sent] {
      waited[i] = Clock::now() - sent;
      answered.fetch_add(1);
    });
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(WaitForAnswers(answered, 5));
  for (int i = 1; i < 5; ++i) {
    EXPECT_GE(waited[i], milliseconds(19)) << i;
    EXPECT_LT(waited[i], milliseconds(500)) << i;  // a loaded machine, but not the allowance
  }
  EXPECT_FALSE(pacer.in_storm());
}

// Once storm_held wait (clients that re-send at once pile up; an open loop's do not), refusals
// wait for the allowance, however long, until the queue is down to a quarter of storm_held.
TEST(RefusalPacerTest, InAStormRefusalsWaitForTheAllowance) {
  // 50 a second after a burst of 1; 8 refusals at once: the storm begins at the fourth held.
  RefusalPacer pacer({.max_per_second = 50,
                      .burst = 1,
                      .max_wait = std::chrono::microseconds(milliseconds(5)),
                      .storm_held = 4});
  std::atomic<int> answered{0};
  const Clock::time_point start = Clock::now();
  Clock::time_point last;
  for (int i = 0; i < 8; ++i) {
    pacer.Refuse([&] {
      last = Clock::now();
      answered.fetch_add(1);
    });
  }
  EXPECT_TRUE(pacer.in_storm());
  ASSERT_TRUE(WaitForAnswers(answered, 8));
  // 7 waited for the allowance, 20 ms apart; with max_wait alone all would be out in ~5 ms.
  EXPECT_GE(last - start, milliseconds(120));
  EXPECT_FALSE(pacer.in_storm());
}

TEST(RefusalPacerTest, ZeroIsUnpaced) {
  RefusalPacer pacer({.max_per_second = 0});
  std::atomic<int> answered{0};
  for (int i = 0; i < 1000; ++i) pacer.Refuse([&] { answered.fetch_add(1); });
  EXPECT_EQ(answered.load(), 1000);
}

TEST(RefusalPacerTest, DestroyingItAnswersWhatWaits) {
  std::atomic<int> answered{0};
  {
    // One a second: the others would wait for seconds.
    RefusalPacer pacer({.max_per_second = 1, .burst = 1});
    for (int i = 0; i < 5; ++i) pacer.Refuse([&] { answered.fetch_add(1); });
    EXPECT_EQ(answered.load(), 1);
  }
  EXPECT_EQ(answered.load(), 5);
}

}  // namespace
}  // namespace gecd::worker
