#include "worker/refusal_pacer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::worker {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// What a pacer told its observer.
struct RecordingObserver final : RefusalPacer::Observer {
  void Held(size_t n, bool in_storm) override {
    held = n;
    max_held = std::max(max_held.load(), n);
    storm = in_storm;
  }
  void StormBegun() override { begun.fetch_add(1); }
  void StormLeftForGrowth() override { left_for_growth.fetch_add(1); }
  std::atomic<size_t> held{0}, max_held{0};
  std::atomic<bool> storm{false};
  std::atomic<int> begun{0}, left_for_growth{0};
};

// Refuses through `pacer`; its answer records in waited[i] how long the refusal waited and
// counts itself in `answered`.
void RefuseTimed(RefusalPacer& pacer, std::vector<Clock::duration>& waited, int i,
                 std::atomic<int>& answered) {
  const Clock::time_point sent = Clock::now();
  pacer.Refuse([&waited, &answered, i, sent] {
    waited[i] = Clock::now() - sent;
    answered.fetch_add(1);
  });
}

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
    RefuseTimed(pacer, waited, i, answered);
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(WaitForAnswers(answered, 5));
  // The first held waits its max_wait; a later one may go with one held before it (below).
  EXPECT_GE(waited[1], milliseconds(19));
  for (int i = 1; i < 5; ++i) {
    EXPECT_LT(waited[i], milliseconds(500)) << i;  // a loaded machine, but not the allowance
  }
  EXPECT_FALSE(pacer.in_storm());
}

// Outside a storm, when the first in line has waited max_wait, everything held then goes with
// it: the pacer's thread wakes once for them all, not once for each.
TEST(RefusalPacerTest, OutsideAStormTheHeldGoTogetherWhenTheFirstHasWaited) {
  // One every 2 s after a burst of 1: the allowance sends none of the held.
  RefusalPacer pacer({.max_per_second = 0.5,
                      .burst = 1,
                      .max_wait = std::chrono::microseconds(milliseconds(1000)),
                      .storm_held = 16});
  std::atomic<int> answered{0};
  std::vector<Clock::duration> waited(3);
  RefuseTimed(pacer, waited, 0, answered);  // the burst: at once
  RefuseTimed(pacer, waited, 1, answered);  // held, due at 1 s
  std::this_thread::sleep_for(milliseconds(300));
  RefuseTimed(pacer, waited, 2, answered);  // held; alone it would wait 1 s more
  ASSERT_TRUE(WaitForAnswers(answered, 3));
  EXPECT_GE(waited[1], milliseconds(999));
  EXPECT_LT(waited[2], milliseconds(900));
}

// Once arrivals keep finding storm_held waiting (clients that re-send at once pile up; an open
// loop's do not), refusals wait for the allowance, however long, until the queue is down to a
// quarter of storm_held.
TEST(RefusalPacerTest, InAStormRefusalsWaitForTheAllowance) {
  // 50 a second after a burst of 1; n refusals at once: n - 1 held, the 4th to the last
  // crowded (kCrowdedInStorm x 4): the storm begins at the last.
  RefusalPacer pacer({.max_per_second = 50,
                      .burst = 1,
                      .max_wait = std::chrono::microseconds(milliseconds(5)),
                      .storm_held = 4});
  const int n = 4 + RefusalPacer::kCrowdedInStorm * 4;
  std::atomic<int> answered{0};
  const Clock::time_point start = Clock::now();
  Clock::time_point last;
  for (int i = 0; i < n; ++i) {
    if (i == n - 1) {
      EXPECT_FALSE(pacer.in_storm());
    }
    pacer.Refuse([&] {
      last = Clock::now();
      answered.fetch_add(1);
    });
  }
  EXPECT_TRUE(pacer.in_storm());
  ASSERT_TRUE(WaitForAnswers(answered, n));
  // Most waited for the allowance, 20 ms apart; with max_wait alone all would be out in ~5 ms.
  EXPECT_GE(last - start, milliseconds(120));
  EXPECT_FALSE(pacer.in_storm());
}

// A held refusal goes by its due time (a little before its call's deadline), whatever the
// allowance: held past the deadline it would reach its client as DEADLINE_EXCEEDED.
TEST(RefusalPacerTest, AHeldRefusalGoesByItsDue) {
  // One a second, always paced by the allowance (max_wait 0): without its due the second
  // refusal would wait a second.
  std::atomic<int> answered{0};
  RefusalPacer pacer({.max_per_second = 1, .burst = 1});
  pacer.Refuse([&] { answered.fetch_add(1); });
  const Clock::time_point sent = Clock::now();
  Clock::time_point when;
  pacer.Refuse(
      [&] {
        when = Clock::now();
        answered.fetch_add(1);
      },
      sent + milliseconds(100));
  EXPECT_EQ(answered.load(), 1);
  ASSERT_TRUE(WaitForAnswers(answered, 2));
  EXPECT_GE(when - sent, milliseconds(99));
  EXPECT_LT(when - sent, milliseconds(900));  // a loaded machine, but not the allowance
  // One already due is answered at once.
  pacer.Refuse([&] { answered.fetch_add(1); }, Clock::now());
  EXPECT_EQ(answered.load(), 3);
}

// A refusal whose call was cancelled is answered at once by Cancel, so that a client that went
// away keeps no place in the queue.
TEST(RefusalPacerTest, CancelAnswersAHeldRefusalAtOnce) {
  // Before the pacer, whose destructor answers what still waits.
  std::atomic<int> answered{0};
  RefusalPacer pacer({.max_per_second = 1, .burst = 1});
  pacer.Refuse([&] { answered.fetch_add(1); }, Clock::time_point::max(), 6);
  EXPECT_EQ(answered.load(), 1);  // inline: not held
  EXPECT_FALSE(pacer.Cancel(6));
  pacer.Refuse([&] { answered.fetch_add(1); }, Clock::time_point::max(), 7);
  pacer.Refuse([&] { answered.fetch_add(10); }, Clock::time_point::max(), 8);
  EXPECT_EQ(pacer.waiting(), 2u);
  EXPECT_TRUE(pacer.Cancel(8));
  EXPECT_EQ(answered.load(), 11);  // on this thread, ahead of the one before it
  EXPECT_FALSE(pacer.Cancel(8));
  EXPECT_FALSE(pacer.Cancel(0));
  EXPECT_EQ(pacer.waiting(), 1u);
}

// Clients that re-send a refusal at once: the queue holds the whole population and grows no
// more, so the storm lasts and refusals go at the allowance.
TEST(RefusalPacerTest, AStormOfClientsThatResendLasts) {
  // Before the pacer, whose destructor answers what still waits.
  std::atomic<int> answered{0}, to_resend{0};
  std::atomic<bool> left_storm{false};
  RefusalPacer pacer({.max_per_second = 100,
                      .burst = 1,
                      .max_wait = std::chrono::microseconds(milliseconds(3)),
                      .storm_held = 16,
                      .storm_growth_period = milliseconds(50)});
  std::function<void()> answer = [&] {
    answered.fetch_add(1);
    to_resend.fetch_add(1);
  };
  // All but the first held, those that find 15 or more waiting crowded: a storm.
  const int clients = 16 + RefusalPacer::kCrowdedInStorm * 16;
  for (int i = 0; i < clients; ++i) pacer.Refuse(answer);
  ASSERT_TRUE(pacer.in_storm());
  const Clock::time_point start = Clock::now();
  while (Clock::now() - start < milliseconds(600)) {
    if (to_resend.load() > 0) {
      to_resend.fetch_sub(1);
      pacer.Refuse(answer);
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!pacer.in_storm()) left_storm = true;
  }
  EXPECT_FALSE(left_storm.load());
  // ~60 at the allowance; left for max_wait alone, the clients would be answered thousands of
  // times.
  EXPECT_LT(answered.load(), 200);
}

// An open loop in a storm: its calls come whatever the pacer does, so the queue grows as long
// as it refuses faster than the allowance. After kGrowingPeriods periods of growth the storm is
// left and refusals wait at most max_wait again.
TEST(RefusalPacerTest, AStormWhoseQueueKeepsGrowingIsLeft) {
  RecordingObserver observer;
  std::atomic<int> answered{0};
  std::atomic<int64_t> late_worst_us{0};
  // max_wait long enough that none of the burst below is answered before it has all come, on a
  // loaded machine too (at 3 ms, CI once saw the storm not begin).
  RefusalPacer pacer({.max_per_second = 20,
                      .burst = 1,
                      .max_wait = std::chrono::microseconds(milliseconds(50)),
                      .storm_held = 16,
                      .storm_growth_period = milliseconds(50),
                      .observer = &observer});
  // A burst of clients that re-send starts the storm: all but the first 16 find 16 or more
  // waiting.
  int sent = 0;
  for (; sent < 16 + RefusalPacer::kCrowdedInStorm * 16 + 16; ++sent) {
    pacer.Refuse([&] { answered.fetch_add(1); });
  }
  EXPECT_TRUE(pacer.in_storm());
  EXPECT_EQ(observer.begun.load(), 1);
  EXPECT_TRUE(observer.storm.load());
  const Clock::time_point start = Clock::now();
  // Then ~1,000 a second for 800 ms, 50 times the allowance.
  while (Clock::now() - start < milliseconds(800)) {
    const Clock::time_point at = Clock::now();
    const bool late = at - start > milliseconds(600);
    pacer.Refuse([&, at, late] {
      answered.fetch_add(1);
      if (!late) return;
      const int64_t us =
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - at).count();
      int64_t worst = late_worst_us.load();
      while (us > worst && !late_worst_us.compare_exchange_weak(worst, us)) {
      }
    });
    ++sent;
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_FALSE(pacer.in_storm());
  ASSERT_TRUE(WaitForAnswers(answered, sent));
  // In the storm they would wait for the allowance: seconds by the end.
  EXPECT_LT(late_worst_us.load(), 150'000);
  EXPECT_EQ(observer.left_for_growth.load(), 1);
  EXPECT_GT(observer.max_held.load(), 16u + RefusalPacer::kCrowdedInStorm * 16);
  EXPECT_EQ(observer.held.load(), 0u);
  EXPECT_FALSE(observer.storm.load());
}

// A closed population in a storm while admission lets fewer of it in: each client whose
// admitted call ends is refused and joins the queue, which grows as the admitted calls in
// flight shrink. Counted together they do not grow, and the storm lasts (the queue alone
// grows as fast as AStormWhoseQueueKeepsGrowingIsLeft's).
TEST(RefusalPacerTest, AQueueThatGrowsAsAdmissionShrinksIsNoOpenLoop) {
  std::atomic<int> answered{0};
  std::atomic<size_t> admitted{2000};
  RefusalPacer pacer({.max_per_second = 20,
                      .burst = 1,
                      .max_wait = std::chrono::microseconds(milliseconds(50)),
                      .storm_held = 16,
                      .storm_growth_period = milliseconds(50),
                      .admitted_in_flight = [&] { return admitted.load(); }});
  const auto refuse = [&] { pacer.Refuse([&] { answered.fetch_add(1); }); };
  for (int i = 0; i < 16 + RefusalPacer::kCrowdedInStorm * 16 + 16; ++i) refuse();
  EXPECT_TRUE(pacer.in_storm());
  const Clock::time_point start = Clock::now();
  bool left_storm = false;
  // ~1,000 a second for 800 ms, each leaving the admitted calls.
  while (Clock::now() - start < milliseconds(800)) {
    admitted.fetch_sub(1);
    refuse();
    if (!pacer.in_storm()) left_storm = true;
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_FALSE(left_storm);
  EXPECT_GT(pacer.waiting(), 500u);
}

// In a storm the held refusals go storm_batch at a time, once the allowance has filled for all
// of them: one at a time they would go a tenth of a second apart at 10 a second.
TEST(RefusalPacerTest, InAStormHeldRefusalsGoInBatches) {
  constexpr int kBurst = 8;
  constexpr int kHeld = 4 + RefusalPacer::kCrowdedInStorm * 4 + 28;
  std::atomic<int> answered{0};
  std::vector<Clock::time_point> at(kBurst + kHeld);
  RefusalPacer pacer({.max_per_second = 100,
                      .burst = kBurst,
                      .max_wait = std::chrono::microseconds(milliseconds(50)),
                      .storm_held = 4,
                      .storm_batch = kBurst});
  // The first kBurst answered inline, the rest held; those that find 3 or more waiting are
  // crowded, and enough of them begin a storm.
  for (int i = 0; i < kBurst + kHeld; ++i) {
    pacer.Refuse([&] { at[answered.fetch_add(1)] = Clock::now(); });
  }
  ASSERT_TRUE(pacer.in_storm());
  ASSERT_TRUE(WaitForAnswers(answered, kBurst + kHeld));
  // Between held refusals answered one after the other: within a batch microseconds, between
  // batches 80 ms (8 at 100 a second). One at a time, each gap would be ~10 ms.
  int close = 0;
  for (int i = kBurst + 1; i < kBurst + kHeld; ++i) {
    if (at[i] - at[i - 1] < milliseconds(3)) ++close;
  }
  EXPECT_GE(close, (kHeld - 1) / 2);
}

// A worker descheduled for a while finds an open loop's arrivals of that time waiting together:
// one crowd, not clients that keep re-sending, so no storm, and they wait at most max_wait.
TEST(RefusalPacerTest, OneCrowdIsNoStorm) {
  std::atomic<int> answered{0};
  RefusalPacer pacer({.max_per_second = 20,
                      .burst = 1,
                      .max_wait = std::chrono::microseconds(milliseconds(3)),
                      .storm_held = 16});
  const Clock::time_point start = Clock::now();
  Clock::time_point last;
  for (int i = 0; i < 40; ++i) {  // 39 held, 24 crowded: under kCrowdedInStorm x 16
    pacer.Refuse([&] {
      last = Clock::now();
      answered.fetch_add(1);
    });
  }
  EXPECT_FALSE(pacer.in_storm());
  ASSERT_TRUE(WaitForAnswers(answered, 40));
  // In a storm, 39 at 20 a second: ~2 s.
  EXPECT_LT(last - start, milliseconds(500));
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
