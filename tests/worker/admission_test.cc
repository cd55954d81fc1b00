#include "worker/admission.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <queue>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::worker {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Refusal = AdmissionController::Refusal;
using Ticket = AdmissionController::Ticket;

constexpr auto kNone = AdmissionController::kNoDeadline;

class AdmissionTest : public ::testing::Test {
 protected:
  AdmissionController Make(int max_in_flight, int slo_ms) {
    return AdmissionController({.max_in_flight = max_in_flight,
                                .slo = milliseconds(slo_ms),
                                .engine_load = nullptr,
                                .publish_in_flight = nullptr},
                               [this] { return now_us_; });
  }
  // On an engine whose step takes 4 ms + 0.5 ms a sentence, steering the pod's margin `cell`.
  AdmissionController MakeOnSharedMargin(ipc::SharedMargin* cell) {
    return AdmissionController(
        {.max_in_flight = 1024,
         .slo = milliseconds(1000),
         .max_batch_size = 128,
         .engine_load =
             [] { return EngineLoad{.step_fixed_us = 4000, .step_per_sequence_us = 500}; },
         .publish_in_flight = nullptr,
         .shared_margin = cell},
        [this] { return now_us_; });
  }
  // One worker of several, told the engine's step time and the others' count by `load`.
  AdmissionController MakeWorker(int slo_ms, int max_batch_size, const EngineLoad* load,
                                 int* published = nullptr) {
    return AdmissionController({.max_in_flight = 1024,
                                .slo = milliseconds(slo_ms),
                                .max_batch_size = max_batch_size,
                                .engine_load = [load] { return *load; },
                                .publish_in_flight =
                                    [published](int n) {
                                      if (published != nullptr) *published = n;
                                    }},
                               [this] { return now_us_; });
  }
  void Advance(milliseconds d) { now_us_ += d.count() * 1000; }

  // One sentence of `bytes` alone, answered with `output` tokens after `busy`.
  void Serve(AdmissionController& admission, size_t bytes, int output, milliseconds busy) {
    const AdmissionController::Decision admitted = admission.Admit(kNone, bytes);
    ASSERT_TRUE(admitted.admitted());
    Advance(busy);
    admission.Release(admitted.tickets[0], output);
  }
  // Admits `n` sentences of `bytes` now, which stay in flight.
  std::vector<Ticket> Hold(AdmissionController& admission, int n, size_t bytes) {
    std::vector<Ticket> tickets;
    for (int i = 0; i < n; ++i) {
      const AdmissionController::Decision admitted = admission.Admit(kNone, bytes);
      EXPECT_TRUE(admitted.admitted()) << i;
      tickets.push_back(admitted.tickets[0]);
    }
    return tickets;
  }

  int64_t now_us_ = 1'000'000;
};

TEST_F(AdmissionTest, BeyondMaxInFlightIsRefused) {
  AdmissionController admission = Make(3, 1000);
  Hold(admission, 3, 40);
  const AdmissionController::Decision refused = admission.Admit(kNone, 40);
  EXPECT_EQ(refused.refusal, Refusal::kMaxInFlight);
  EXPECT_THAT(refused.message, HasSubstr("server.max_in_flight 3"));
  EXPECT_GT(refused.retry_after.count(), 0);
  EXPECT_EQ(admission.in_flight(), 3);
}

// Before a first answer nothing predicts, so a flood at start-up is held to a window (or
// max_in_flight, if smaller) until the first answer teaches the estimates.
TEST_F(AdmissionTest, AColdStartIsHeldToTheStartWindow) {
  AdmissionController admission = Make(1024, 1000);
  std::vector<Ticket> held = Hold(admission, AdmissionController::kStartWindow, 40);
  const AdmissionController::Decision refused = admission.Admit(kNone, 40);
  EXPECT_EQ(refused.refusal, Refusal::kNoEstimate);
  EXPECT_THAT(refused.message, HasSubstr("first answer"));
  EXPECT_GT(refused.retry_after.count(), 0);
  Advance(milliseconds(100));
  admission.Release(held[0], 19);  // 5 ms per step per sentence... at 32 in flight
  EXPECT_TRUE(admission.Admit(kNone, 40).admitted());
}

// A sentence of 40 bytes answered with 19 tokens in 100 ms alone: 5 ms per step per sentence in
// flight, half a token per byte. The same sentence behind k others is predicted (k + 1) * 100
// ms; the objective holds the in-flight count where that reaches it.
TEST_F(AdmissionTest, RefusesWhenThePredictedTimeExceedsTheObjective) {
  AdmissionController admission = Make(1024, 800);
  Serve(admission, 40, 19, milliseconds(100));
  EXPECT_NEAR(admission.step_seconds_per_sentence(), 0.005, 1e-12);
  EXPECT_NEAR(admission.output_tokens_per_byte(), 0.475, 1e-12);
  Hold(admission, 8, 40);  // the 8th was predicted 800 ms: admitted
  EXPECT_EQ(admission.PredictedTime(40), microseconds(900'000));
  const AdmissionController::Decision refused = admission.Admit(kNone, 40);
  EXPECT_EQ(refused.refusal, Refusal::kSlo);
  EXPECT_THAT(refused.message,
              HasSubstr("predicted 900 ms (8 sentences in flight, ~19 output tokens)"));
  EXPECT_THAT(refused.message, HasSubstr("latency objective of 800 ms (server.slo_p99_ms)"));
  // One of the eight must leave, a ninth of 900 ms from now on average, give or take half.
  EXPECT_GE(refused.retry_after, milliseconds(50));
  EXPECT_LE(refused.retry_after, milliseconds(150));
}

TEST_F(AdmissionTest, RefusesWhenThePredictedTimeExceedsASoonerDeadline) {
  AdmissionController admission = Make(1024, 1000);
  Serve(admission, 40, 19, milliseconds(100));
  Hold(admission, 2, 40);  // a third: 300 ms
  EXPECT_TRUE(admission.Admit(microseconds(300'000), 40).admitted());
  const AdmissionController::Decision refused = admission.Admit(microseconds(350'000), 40);
  EXPECT_EQ(refused.refusal, Refusal::kDeadline);
  EXPECT_THAT(refused.message, HasSubstr("the 350 ms left to the request's deadline"));
  // A deadline looser than the objective gives no more room than the objective.
  Hold(admission, 7, 40);  // ten in flight: the eleventh would take 1.1 s
  EXPECT_EQ(admission.Admit(microseconds(5'000'000), 40).refusal, Refusal::kSlo);
}

// A long sentence holds the engine for more steps: behind the same queue it is refused where a
// short one is admitted.
TEST_F(AdmissionTest, ALongerSentenceIsPredictedLongerAndRefusedSooner) {
  AdmissionController admission = Make(1024, 1000);
  Serve(admission, 40, 19, milliseconds(100));
  Hold(admission, 4, 40);
  EXPECT_EQ(admission.PredictedTime(40), microseconds(500'000));
  EXPECT_EQ(admission.PredictedTime(200), microseconds(2'400'000));  // 96 steps * 5 ms * 5
  EXPECT_EQ(admission.Admit(kNone, 200).refusal, Refusal::kSlo);
  EXPECT_TRUE(admission.Admit(kNone, 40).admitted());
  // Unless its output is capped (max_output_tokens 9: ten steps of 5 ms with six in flight).
  EXPECT_TRUE(admission.Admit(kNone, 200, /*max_output_tokens=*/9).admitted());
}

TEST_F(AdmissionTest, NothingAheadIsAlwaysAdmitted) {
  AdmissionController admission = Make(1024, 100);
  Serve(admission, 40, 19, milliseconds(5000));  // far over the objective alone
  EXPECT_TRUE(admission.Admit(kNone, 40).admitted());
  EXPECT_FALSE(admission.Admit(kNone, 40).admitted());
}

// What is learned follows the engine within a few time constants of busy time, and idle time
// and refusals teach nothing.
TEST_F(AdmissionTest, EstimatesFollowTheEngineAndIgnoreIdleTimeAndRefusals) {
  AdmissionController admission = Make(1024, 1000);
  for (int i = 0; i < 10; ++i) Serve(admission, 40, 19, milliseconds(100));
  EXPECT_NEAR(admission.step_seconds_per_sentence(), 0.005, 1e-9);
  Advance(milliseconds(60'000));
  std::vector<Ticket> held = Hold(admission, 10, 40);  // the tenth: 1,000 ms x a margin under 1
  for (int i = 0; i < 100'000; ++i) {                  // a flood of refusals
    ASSERT_FALSE(admission.Admit(kNone, 40).admitted());
    now_us_ += 10;
  }
  for (const Ticket& t : held) admission.Release(t, -1);  // cancelled: teaches nothing either
  EXPECT_NEAR(admission.step_seconds_per_sentence(), 0.005, 1e-9);
  // A faster engine (1 ms per step) takes over.
  for (int i = 0; i < 100; ++i) Serve(admission, 40, 19, milliseconds(20));
  EXPECT_NEAR(admission.step_seconds_per_sentence(), 0.001, 0.0002);
  // Output lengths too: these answers are as long as their text in bytes.
  for (int i = 0; i < 100; ++i) Serve(admission, 40, 40, milliseconds(41));
  EXPECT_NEAR(admission.output_tokens_per_byte(), 1.0, 0.05);
}

// The margin follows the answers: late ones (past the budget they were admitted against) raise
// it fast, answers in time lower it slowly, holding the late share near 0.5%; refusals, and
// answers with no prediction, move nothing.
TEST_F(AdmissionTest, TheMarginHoldsTheShareOfLateAnswers) {
  AdmissionController admission = Make(1024, 1000);
  Serve(admission, 40, 19, milliseconds(100));  // no prediction yet: teaches the rates only
  EXPECT_EQ(admission.margin(), 1.0);
  // Every answer late (1.2 s against an objective of 1 s): the margin rises to its top.
  for (int i = 0; i < 20; ++i) Serve(admission, 40, 19, milliseconds(1200));
  EXPECT_GT(admission.margin(), 2.0);
  EXPECT_LE(admission.margin(), AdmissionController::kMaxMargin);
  // A late share of 1 in 100 (over the 0.5% held) keeps raising it; 1 in 400 lowers it.
  const auto share = [&](int one_in, int answers) {
    const double before = admission.margin();
    for (int i = 0; i < answers; ++i) {
      Serve(admission, 40, 19, milliseconds(i % one_in == 0 ? 1200 : 100));
    }
    return admission.margin() / before;
  };
  while (admission.margin() > 1.5) Serve(admission, 40, 19, milliseconds(100));
  EXPECT_GT(share(100, 2000), 1.0);
  EXPECT_LT(share(400, 2000), 1.0);
  // All in time: down to its floor, which admits what is predicted a little over the budget.
  for (int i = 0; i < 20'000; ++i) Serve(admission, 40, 19, milliseconds(100));
  EXPECT_EQ(admission.margin(), AdmissionController::kMinMargin);
}

// A margin below 1 was learned at the loads answers came from: with more in flight than answers
// in time were admitted with, a sentence is judged at a margin of at least 1, so that a flood
// after a light load is not admitted up to 1.4x the budget.
TEST_F(AdmissionTest, BeyondTheLoadsAnswersCameFromTheMarginIsAtLeastOne) {
  AdmissionController admission = Make(1024, 1000);
  // Alone, 600 ms each: 30 ms a step per sentence in flight, and answers in time near their
  // budget take the margin to its floor.
  for (int i = 0; i < 5'000; ++i) Serve(admission, 40, 19, milliseconds(600));
  ASSERT_EQ(admission.margin(), AdmissionController::kMinMargin);
  std::vector<Ticket> held = Hold(admission, 1, 40);
  // A second in flight: predicted 1,200 ms, 840 at the margin, but answers came with one.
  const AdmissionController::Decision second = admission.Admit(kNone, 40);
  EXPECT_EQ(second.refusal, AdmissionController::Refusal::kSlo);
  EXPECT_THAT(second.message, HasSubstr("predicted 1200 ms"));
  for (const Ticket& t : held) admission.Release(t, -1);
}

// A sentence still running past its budget counts as late at once, not when its answer comes
// (a budget later), and only once.
TEST_F(AdmissionTest, ASentenceRunningPastItsBudgetIsLateBeforeItIsAnswered) {
  AdmissionController admission = Make(1024, 1000);
  for (int i = 0; i < 3; ++i) Serve(admission, 40, 19, milliseconds(100));
  const double before = admission.margin();
  std::vector<Ticket> held = Hold(admission, 2, 40);
  ASSERT_GT(held[0].predicted_us, 0);
  Advance(milliseconds(900));
  // A decision (refused: 1 µs left) looks for overdue sentences: none yet.
  ASSERT_FALSE(admission.Admit(std::chrono::microseconds(1), 40).admitted());
  EXPECT_EQ(admission.margin(), before);
  Advance(milliseconds(200));
  ASSERT_FALSE(admission.Admit(std::chrono::microseconds(1), 40).admitted());  // both are late
  const double raised = admission.margin();
  EXPECT_GT(raised, 1.15 * before);
  // Their answers, late, do not count again; nor does a cancellation.
  admission.Release(held[0], 19);
  admission.Release(held[1], AdmissionController::kMissedDeadline);
  EXPECT_EQ(admission.margin(), raised);
}

// Late sentences come in bursts, and answers in time walk the margin back down past where the
// burst was admitted: a late sentence leaves a mark, 1.35 times the margin it was admitted at,
// which admission applies while as many are in flight as it was admitted with (85% of them),
// and which fades over about 30 s. At a lighter load the margin alone decides.
TEST_F(AdmissionTest, ALateSentenceLeavesAMarkThatHoldsTheMarginAtItsLoad) {
  ipc::SharedMargin cell;
  AdmissionController admission = MakeOnSharedMargin(&cell);
  for (int i = 0; i < 3; ++i) Serve(admission, 40, 19, milliseconds(100));
  const auto set_margin = [&cell](double m) { cell.margin_bits.store(std::bit_cast<uint64_t>(m)); };
  set_margin(0.8);
  EXPECT_EQ(cell.MarkAt(now_us_), AdmissionController::kMinMargin);  // none yet
  // Ten in flight: the first four answered in time, the last six late.
  std::vector<Ticket> held = Hold(admission, 10, 40);
  ASSERT_EQ(held[4].ahead, 5);
  ASSERT_EQ(held[4].margin, held[9].margin);
  const double admitted_at = held[9].margin;
  Advance(milliseconds(500));
  for (int i = 0; i < 4; ++i) admission.Release(held[i], 19);
  Advance(milliseconds(600));
  for (int i = 4; i < 10; ++i) admission.Release(held[i], 19);
  const double mark = 1.35 * admitted_at;
  EXPECT_DOUBLE_EQ(cell.MarkAt(now_us_), mark);
  EXPECT_EQ(cell.mark_in_flight.load(), 5);  // the fewest a late one was admitted with
  EXPECT_GT(admission.margin(), mark);       // the burst raised the margin itself too
  // Answers in time have brought the margin down (here at once, to 0.8).
  set_margin(0.8);
  std::vector<Ticket> again = Hold(admission, 5, 40);
  EXPECT_EQ(again[3].margin, 0.8);                         // 4 in flight, under 85% of 5
  EXPECT_DOUBLE_EQ(again[4].margin, mark);                 // 5: the mark holds
  for (const Ticket& t : again) admission.Release(t, -1);  // cancelled: moves nothing
  EXPECT_DOUBLE_EQ(cell.MarkAt(now_us_), mark);
  // A time constant later, its excess over the floor (in log terms) has fallen by e.
  Advance(milliseconds(30'000));
  const double floor = AdmissionController::kMinMargin;
  EXPECT_NEAR(cell.MarkAt(now_us_), floor * std::exp(std::log(mark / floor) / std::exp(1.0)), 1e-9);
  // A late sentence admitted at a higher margin moves it up, from its own load.
  set_margin(1.2);
  std::vector<Ticket> higher = Hold(admission, 2, 40);
  ASSERT_EQ(higher[1].margin, 1.2);
  Advance(milliseconds(1100));
  admission.Release(higher[0], -1);
  admission.Release(higher[1], 19);
  EXPECT_DOUBLE_EQ(cell.MarkAt(now_us_), 1.35 * 1.2);
  EXPECT_EQ(cell.mark_in_flight.load(), 2);
}

// A flood is admitted at a growing load, and the margin it is admitted at grows with it (past
// the loads answers came from it is at least 1): its late sentences are counted in that order,
// and one admitted at a higher margin, from more in flight, raises the mark. Within one burst
// the raised mark keeps applying from the fewest in flight any of its late sentences had: the
// burst showed the lower margin was too low at that load already. (Moved up to the higher one's
// load, it left the loads between to the margin, which answers in time walked down until a
// second burst of late answers came from there, ~4 s after the first, session 30.)
TEST_F(AdmissionTest, ABurstsMarkAppliesFromTheFewestInFlightOfItsLateSentences) {
  ipc::SharedMargin cell;
  AdmissionController admission = MakeOnSharedMargin(&cell);
  for (int i = 0; i < 3; ++i) Serve(admission, 40, 19, milliseconds(100));
  const auto set_margin = [&cell](double m) { cell.margin_bits.store(std::bit_cast<uint64_t>(m)); };
  // Five admitted at 1.1, then three more at 1.5: the first four answered in time, the rest late.
  set_margin(1.1);
  std::vector<Ticket> held = Hold(admission, 5, 40);
  set_margin(1.5);
  for (const Ticket& t : Hold(admission, 3, 40)) held.push_back(t);
  ASSERT_EQ(held[4].margin, 1.1);
  ASSERT_EQ(held[5].margin, 1.5);
  ASSERT_EQ(held[5].ahead, 6);
  Advance(milliseconds(500));
  for (int i = 0; i < 4; ++i) admission.Release(held[i], 19);
  Advance(milliseconds(600));
  // The next decision counts the four overdue, in the order they were admitted.
  for (const Ticket& t : Hold(admission, 1, 40)) admission.Release(t, -1);
  for (int i = 4; i < 8; ++i) admission.Release(held[i], 19);
  EXPECT_DOUBLE_EQ(cell.MarkAt(now_us_), 1.35 * 1.5);
  EXPECT_EQ(cell.mark_in_flight.load(), 5);  // held[4]'s, not held[5]'s 6
  set_margin(1.0);
  std::vector<Ticket> again = Hold(admission, 5, 40);
  EXPECT_DOUBLE_EQ(again[4].margin, 1.35 * 1.5);  // 5 in flight: the burst's mark holds
  for (const Ticket& t : again) admission.Release(t, -1);
  // A late sentence more than an objective after the burst starts a mark of its own.
  Advance(milliseconds(1500));
  set_margin(1.8);
  std::vector<Ticket> later = Hold(admission, 3, 40);
  Advance(milliseconds(1100));
  for (const Ticket& t : later) admission.Release(t, 19);
  EXPECT_DOUBLE_EQ(cell.MarkAt(now_us_), 1.35 * 1.8);
  EXPECT_EQ(cell.mark_in_flight.load(), 1);  // from later[0], the fewest of its own burst
}

// A sentence cancelled at its deadline was late, though never answered: with deadlines at the
// objective every late sentence ends so, and a margin moved only by answers would see nothing
// but answers in time and keep admitting what then misses. It teaches no step time (its own is
// only known to exceed its budget); a sentence its client cancelled moves nothing.
TEST_F(AdmissionTest, ASentenceCancelledAtItsDeadlineCountsAsLate) {
  AdmissionController admission = Make(1024, 1000);
  Serve(admission, 40, 19, milliseconds(100));  // teaches the rates: predictions from now on
  const double step = admission.step_seconds_per_sentence();
  ASSERT_EQ(admission.margin(), 1.0);
  const auto end = [&](int output_tokens) {
    const AdmissionController::Decision d = admission.Admit(milliseconds(1000), 40);
    ASSERT_TRUE(d.admitted());
    Advance(milliseconds(1000));
    admission.Release(d.tickets[0], output_tokens);
  };
  for (int i = 0; i < 10; ++i) end(-1);  // cancelled by the client
  EXPECT_EQ(admission.margin(), 1.0);
  for (int i = 0; i < 20; ++i) end(AdmissionController::kMissedDeadline);
  EXPECT_GT(admission.margin(), 2.0);
  EXPECT_NEAR(admission.step_seconds_per_sentence(), step, step * 1e-9);
  EXPECT_EQ(admission.in_flight(), 0);
}

// After an overload took the margin to its top, answers in time bring it down within seconds
// once none has been late for kMarginQuiet, however few they are (at 5 answers a second the
// tracker alone took minutes, and refused long sentences all along); a late answer restarts
// the wait.
TEST_F(AdmissionTest, AfterAnOverloadTheMarginComesDownInSecondsNotMinutes) {
  AdmissionController admission = Make(1024, 1000);
  Serve(admission, 40, 19, milliseconds(100));
  for (int i = 0; i < 20; ++i) Serve(admission, 40, 19, milliseconds(1200));
  const double top = admission.margin();
  ASSERT_GT(top, 2.0);
  // 5 answers a second, in time, each alone.
  const auto light = [&](std::chrono::seconds how_long) {
    for (int i = 0; i < 5 * how_long.count(); ++i) {
      Serve(admission, 40, 19, milliseconds(100));
      Advance(milliseconds(100));
    }
  };
  light(std::chrono::seconds(18));
  EXPECT_GT(admission.margin(), 0.9 * top);  // the quiet time has not passed
  light(std::chrono::seconds(16));
  EXPECT_LT(admission.margin(), 1.1);
  // Late again: the margin rises, and stays up for the quiet time.
  for (int i = 0; i < 10; ++i) Serve(admission, 40, 19, milliseconds(1200));
  const double again = admission.margin();
  EXPECT_GT(again, 2.0);
  light(std::chrono::seconds(18));
  EXPECT_GT(admission.margin(), 0.9 * again);
}

// A busy pod is quiet sooner: after kQuietAnswers answers in time in a row the margin relaxes
// with time, without waiting kMarginQuiet; a late answer restarts the count.
TEST_F(AdmissionTest, ABusyPodIsQuietAfterARunOfAnswersInTime) {
  AdmissionController admission = Make(1024, 1000);
  Serve(admission, 40, 19, milliseconds(100));
  for (int i = 0; i < 20; ++i) Serve(admission, 40, 19, milliseconds(1200));
  ASSERT_GT(admission.margin(), 2.0);
  // 500 answers a second in time: the run reaches the count in 1.2 s.
  const auto busy = [&](int answers) {
    for (int i = 0; i < answers; ++i) Serve(admission, 40, 19, milliseconds(2));
  };
  // Then 50 answers in time over 4 s: alone they lower the margin by 2.5%.
  const auto slow = [&] {
    const double before = admission.margin();
    for (int i = 0; i < 50; ++i) Serve(admission, 40, 19, milliseconds(80));
    return admission.margin() / before;
  };
  busy(AdmissionController::kQuietAnswers - 2);
  Serve(admission, 40, 19, milliseconds(1200));  // late: the run starts again
  busy(AdmissionController::kQuietAnswers - 60);
  ASSERT_GT(admission.margin(), 1.3);
  EXPECT_GT(slow(), 0.95);  // not quiet: 5 s since the last late answer, a run of 590
  busy(10);
  EXPECT_LT(slow(), 0.85);  // quiet: its logarithm halves in kMarginHalfLife
}

// The margin is the pod's: a worker whose answers dried up after an overload follows the one
// that keeps answering, instead of refusing at the top of its own margin for good (session 19:
// after a start-up flood, one of two workers admitted 4 sentences a second and refused 400).
TEST_F(AdmissionTest, WorkersShareOneMargin) {
  ipc::SharedMargin shared;
  const auto make = [&] {
    return AdmissionController({.max_in_flight = 1024,
                                .slo = milliseconds(1000),
                                .engine_load = nullptr,
                                .publish_in_flight = nullptr,
                                .shared_margin = &shared},
                               [this] { return now_us_; });
  };
  AdmissionController busy = make();
  AdmissionController starved = make();
  Serve(busy, 40, 19, milliseconds(100));
  for (int i = 0; i < 20; ++i) Serve(busy, 40, 19, milliseconds(1200));
  // Late answers in one worker close admission in both.
  EXPECT_GT(starved.margin(), 2.0);
  EXPECT_EQ(starved.margin(), busy.margin());
  // Only the busy worker answers, in time; past the quiet time the margin both apply is down.
  for (int i = 0; i < 5 * 40; ++i) {
    Serve(busy, 40, 19, milliseconds(100));
    Advance(milliseconds(100));
  }
  EXPECT_LT(starved.margin(), 1.1);
  EXPECT_EQ(starved.margin(), busy.margin());
  // And what one answers late while the other answers in time moves the same margin.
  Serve(starved, 40, 19, milliseconds(100));
  const double before = busy.margin();
  Serve(starved, 40, 19, milliseconds(1200));
  EXPECT_GT(busy.margin(), before);
}

// An engine that stops answering: nothing learned moves, so the in-flight count alone stops
// admission where it predicts the objective spent, far short of max_in_flight.
TEST_F(AdmissionTest, AStalledEngineStopsBeingSentMore) {
  AdmissionController admission = Make(1024, 1000);
  Serve(admission, 40, 19, milliseconds(100));
  int admitted = 0;
  for (int i = 0; i < 1000; ++i) {  // one every 10 ms for 10 s, none answered
    if (admission.Admit(kNone, 40).admitted()) ++admitted;
    Advance(milliseconds(10));
  }
  EXPECT_EQ(admitted, 10);
}

// With the engine's measured step line, a sentence is predicted from the batch across every
// worker: 40 bytes answered with 19 tokens teach 0.475 tokens per byte; behind 10 sentences of
// the other workers, a step of 11 takes 4 ms + 11 * 0.5 ms, and 20 of them 190 ms.
TEST_F(AdmissionTest, TheEnginesStepTimeAndTheOtherWorkersPredict) {
  EngineLoad load{.step_fixed_us = 4000, .step_per_sequence_us = 500, .others_admitted = 0};
  int published = -1;
  AdmissionController admission = MakeWorker(1000, 128, &load, &published);
  Serve(admission, 40, 19, milliseconds(100));
  EXPECT_EQ(published, 0);
  load.others_admitted = 10;
  EXPECT_EQ(admission.PredictedTime(40), microseconds(190'000));
  std::vector<Ticket> held = Hold(admission, 2, 40);
  EXPECT_EQ(published, 2);
  EXPECT_EQ(admission.PredictedTime(40), microseconds(20 * (4000 + 13 * 500)));
  // The step's fixed part is paid once per step, not per sentence: twice the sentences do not
  // take twice as long (the own-flight model would predict 13/11 * 190 ms here... and 2x at 22).
  load.others_admitted = 21;
  EXPECT_LT(admission.PredictedTime(40), microseconds(2 * 190'000));
  admission.Release(held[0], -1);
  EXPECT_EQ(published, 1);
}

// Beyond engine.max_batch_size, a sentence also waits for room: with 16 in flight and batches
// of 8, for the 8 ahead of it to leave, a mean output + 1 (20) steps; then its own 20 steps.
TEST_F(AdmissionTest, BeyondTheEnginesBatchASentenceWaitsForRoom) {
  EngineLoad load{.step_fixed_us = 4000, .step_per_sequence_us = 500, .others_admitted = 0};
  AdmissionController admission = MakeWorker(1000, 8, &load);
  Serve(admission, 40, 19, milliseconds(100));
  load.others_admitted = 15;
  EXPECT_EQ(admission.PredictedTime(40), microseconds((20 + 20) * (4000 + 8 * 500)));
}

// A text's sentences run side by side: it takes as long as its longest sentence in a batch grown
// by all of them, and is admitted whole or not at all. 0.475 output tokens per byte: the 80-byte
// sentence makes 38 tokens, 39 steps of 4 ms + 0.5 ms per sentence in the batch.
TEST_F(AdmissionTest, ATextIsAdmittedWholeOnItsLongestSentenceInTheGrownBatch) {
  EngineLoad load{.step_fixed_us = 4000, .step_per_sequence_us = 500, .others_admitted = 40};
  int published = -1;
  AdmissionController admission = MakeWorker(1000, 128, &load, &published);
  Serve(admission, 40, 19, milliseconds(100));
  Hold(admission, 1, 40);
  const std::vector<size_t> text = {40, 80, 20};
  // Alone, the 80-byte sentence would fit (42 in the batch: 975 ms); with its text's other two,
  // 44 in the batch, 39 * 26 ms = 1,014 ms does not.
  EXPECT_EQ(admission.PredictedTime(80), microseconds(39 * (4000 + 42 * 500)));
  const AdmissionController::Decision refused = admission.Admit(kNone, text);
  EXPECT_EQ(refused.refusal, Refusal::kSlo);
  EXPECT_THAT(refused.message, HasSubstr("a text of 3 sentences: overloaded: predicted 1014 ms"));
  EXPECT_TRUE(refused.tickets.empty());
  EXPECT_EQ(admission.in_flight(), 1);
  // Ten fewer elsewhere: 34 in the batch, 819 ms; all three admitted, each judged later
  // against its own prediction in that batch.
  load.others_admitted = 30;
  const AdmissionController::Decision admitted = admission.Admit(kNone, text);
  ASSERT_TRUE(admitted.admitted());
  ASSERT_EQ(admitted.tickets.size(), 3u);
  EXPECT_EQ(admission.in_flight(), 4);
  EXPECT_EQ(published, 4);
  EXPECT_DOUBLE_EQ(admitted.tickets[0].predicted_us, 20 * 21000.0);
  EXPECT_DOUBLE_EQ(admitted.tickets[1].predicted_us, 39 * 21000.0);
  EXPECT_DOUBLE_EQ(admitted.tickets[2].predicted_us, 10.5 * 21000.0);
  for (const Ticket& ticket : admitted.tickets) admission.Release(ticket, -1);
  EXPECT_EQ(admission.in_flight(), 1);
}

// server.max_in_flight counts a text's sentences; a text with more sentences than that is still
// answered when nothing else is in flight (else it could never be).
TEST_F(AdmissionTest, ATextLargerThanMaxInFlightIsAdmittedOnlyAlone) {
  AdmissionController admission = Make(3, 1000);
  const std::vector<size_t> text(5, 40);
  const AdmissionController::Decision alone = admission.Admit(kNone, text);
  ASSERT_TRUE(alone.admitted());
  EXPECT_EQ(admission.in_flight(), 5);
  const AdmissionController::Decision behind = admission.Admit(kNone, std::vector<size_t>{40, 40});
  EXPECT_EQ(behind.refusal, Refusal::kMaxInFlight);
  EXPECT_THAT(behind.message, HasSubstr("a text of 2 sentences: server is at its in-flight limit"));
  for (const Ticket& ticket : alone.tickets) admission.Release(ticket, -1);
  Hold(admission, 2, 40);
  // Two in flight and a limit of three: room for one sentence, not a text of two.
  EXPECT_EQ(admission.Admit(kNone, std::vector<size_t>{40, 40}).refusal, Refusal::kMaxInFlight);
  EXPECT_TRUE(admission.Admit(kNone, 40).admitted());
}

// A batching engine on the fake clock: every step runs every sentence in flight and takes
// base + per_sentence * n; a sentence leaves after its output tokens + 1 steps. Sentences that
// arrive during a step join the next.
class BatchingEngine {
 public:
  // With `tokens_per_step` > 1, a speculating engine: each step emits that many tokens of
  // every sentence (its accepted drafts and its own).
  BatchingEngine(microseconds base, microseconds per_sentence, int tokens_per_step = 1)
      : BatchingEngine(base, per_sentence, tokens_per_step, /*max_batch=*/0, /*varying=*/false) {}
  // As the engine runs: at most `max_batch` sentences a step, the others waiting in order; and
  // with `varying`, each sentence's own tokens per step drawn from tokens_per_step / 2 to
  // 1.5 * tokens_per_step (how much of its input the answer copies: edits take more steps).
  BatchingEngine(microseconds base, microseconds per_sentence, int tokens_per_step, int max_batch,
                 bool varying)
      : base_(base),
        per_sentence_(per_sentence),
        tokens_per_step_(tokens_per_step),
        max_batch_(max_batch),
        varying_(varying) {}

  struct Running {
    Ticket ticket;
    int worker = 0;  // whose admission holds the ticket
    int output = 0;
    int steps_left = 0;
    int64_t sent_us = 0;
    int client = 0;
  };
  void Add(Running r) {
    int tokens_per_step = tokens_per_step_;
    if (varying_) {
      draws_ = draws_ * 6364136223846793005ull + 1442695040888963407ull;
      tokens_per_step =
          tokens_per_step_ / 2 + static_cast<int>((draws_ >> 33) % (tokens_per_step_ + 1));
    }
    r.steps_left = (r.output + tokens_per_step - 1) / tokens_per_step + 1;
    joining_.push_back(r);
  }
  bool busy() const { return step_end_us_ >= 0; }
  int64_t step_end_us() const { return step_end_us_; }
  // Starts a step at `now_us` if idle and there is work.
  void MaybeStart(int64_t now_us) {
    if (busy()) return;
    const size_t room =
        max_batch_ > 0 ? static_cast<size_t>(max_batch_) - running_.size() : joining_.size();
    const auto joined = joining_.begin() + std::min(room, joining_.size());
    running_.insert(running_.end(), joining_.begin(), joined);
    joining_.erase(joining_.begin(), joined);
    if (running_.empty()) return;
    step_end_us_ = now_us + base_.count() + per_sentence_.count() * std::ssize(running_);
  }
  // Ends the step in progress: returns the sentences it finished.
  std::vector<Running> EndStep() {
    std::vector<Running> done;
    std::vector<Running> still;
    for (Running& r : running_) (--r.steps_left == 0 ? done : still).push_back(r);
    running_ = std::move(still);
    const int64_t end = step_end_us_;
    step_end_us_ = -1;
    MaybeStart(end);
    return done;
  }

 private:
  const microseconds base_, per_sentence_;
  const int tokens_per_step_;
  const int max_batch_;
  const bool varying_;
  uint64_t draws_ = 1;
  std::vector<Running> running_, joining_;
  int64_t step_end_us_ = -1;
};

struct LoadResult {
  int answered = 0;
  int refused = 0;
  int within_objective = 0;
  double p99_ms = 0;
  double goodput_per_s = 0;
};

// A sentence mix like JFLEG's: mostly short, a tail of long ones; bytes scatter around four
// per output token, so a prediction from the length is only approximately right.
struct MixSentence {
  int output;
  size_t bytes;
};
MixSentence Mix(uint64_t i) {
  static constexpr int kOutputs[] = {8, 12, 14, 16, 18, 20, 22, 24, 28, 32, 40, 55, 70};
  const uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull;
  const int output = kOutputs[(h >> 33) % std::size(kOutputs)];
  const double scatter = 0.8 + 0.4 * static_cast<double>((h >> 13) % 1000) / 1000;
  return {output, static_cast<size_t>(output * 4 * scatter)};
}

// Tallies one simulated load run of `duration` from `start_us`: answers to sentences sent in
// its first quarter are not counted; goodput is over the rest.
class Tally {
 public:
  Tally(int64_t start_us, milliseconds duration, milliseconds objective)
      : count_from_us_(start_us + duration.count() * 250),
        end_us_(start_us + duration.count() * 1000),
        objective_ms_(static_cast<double>(objective.count())) {}
  int64_t end_us() const { return end_us_; }
  void Answered(int64_t sent_us, int64_t now_us) {
    if (sent_us < count_from_us_) return;
    const double ms = static_cast<double>(now_us - sent_us) * 1e-3;
    ++result_.answered;
    latencies_ms_.push_back(ms);
    if (ms <= objective_ms_) ++result_.within_objective;
  }
  void Refused(int64_t now_us) {
    if (now_us >= count_from_us_) ++result_.refused;
  }
  LoadResult Result() {
    std::sort(latencies_ms_.begin(), latencies_ms_.end());
    if (!latencies_ms_.empty()) {
      result_.p99_ms = latencies_ms_[static_cast<size_t>(0.99 * (latencies_ms_.size() - 1))];
    }
    result_.goodput_per_s =
        result_.within_objective / (static_cast<double>(end_us_ - count_from_us_) * 1e-6);
    return result_;
  }

 private:
  const int64_t count_from_us_, end_us_;
  const double objective_ms_;
  LoadResult result_;
  std::vector<double> latencies_ms_;
};

// Ends the engine's step in progress at its end time (now_us moves there): what it finished is
// released to the worker that admitted it and tallied; returned for the caller's clients.
std::vector<BatchingEngine::Running> EndStep(const std::vector<AdmissionController*>& workers,
                                             BatchingEngine& engine, int64_t& now_us,
                                             Tally& tally) {
  now_us = engine.step_end_us();
  std::vector<BatchingEngine::Running> done = engine.EndStep();
  for (const BatchingEngine::Running& r : done) {
    workers[r.worker]->Release(r.ticket, r.output);
    tally.Answered(r.sent_us, now_us);
  }
  return done;
}

// `sentence` from `client` arrives at `worker` now: into the engine if admitted (returns true).
bool Arrive(const std::vector<AdmissionController*>& workers, int worker, BatchingEngine& engine,
            const MixSentence& sentence, int64_t now_us, int client) {
  const AdmissionController::Decision decision = workers[worker]->Admit(kNone, sentence.bytes);
  if (!decision.admitted()) return false;
  engine.Add({.ticket = decision.tickets[0],
              .worker = worker,
              .output = sentence.output,
              .sent_us = now_us,
              .client = client});
  engine.MaybeStart(now_us);
  return true;
}

// `clients` closed-loop clients for `duration` (the first quarter not counted): each answer is
// followed by the next sentence at once, each refusal by the same sentence 2 ms later (at once:
// a refusal's round trip on a loaded box).
LoadResult ClosedLoop(const std::vector<AdmissionController*>& workers, BatchingEngine& engine,
                      int64_t& now_us, int clients, milliseconds duration, milliseconds objective) {
  Tally tally(now_us, duration, objective);
  struct Send {
    int64_t at_us;
    int client;
    uint64_t sentence;
    bool operator>(const Send& o) const { return at_us > o.at_us; }
  };
  std::priority_queue<Send, std::vector<Send>, std::greater<>> sends;
  uint64_t next_sentence = 0;
  for (int c = 0; c < clients; ++c) sends.push({now_us, c, next_sentence++});
  while (true) {
    if (engine.busy() && (sends.empty() || engine.step_end_us() <= sends.top().at_us)) {
      for (const BatchingEngine::Running& r : EndStep(workers, engine, now_us, tally)) {
        if (now_us < tally.end_us()) sends.push({now_us, r.client, next_sentence++});
      }
      continue;
    }
    if (sends.empty()) break;
    const Send send = sends.top();
    sends.pop();
    now_us = send.at_us;
    const int worker = send.client % std::ssize(workers);
    if (!Arrive(workers, worker, engine, Mix(send.sentence), now_us, send.client)) {
      tally.Refused(now_us);
      if (now_us + 2000 < tally.end_us()) sends.push({now_us + 2000, send.client, send.sentence});
    }
  }
  return tally.Result();
}

// A closed loop of `clients` kept its admitted p99 within the 1 s objective and its goodput at
// 95% or more of `reference`, the best a fixed concurrency of at most `clients` does.
void ExpectKeepsGoodputAndTheObjective(const LoadResult& r, int clients, double reference) {
  EXPECT_LE(r.p99_ms, 1000) << clients << " clients";
  EXPECT_GE(r.goodput_per_s, 0.95 * reference)
      << clients << " clients: " << r.goodput_per_s << "/s within the objective, reference "
      << reference << "/s; " << r.refused << " refused, p99 " << r.p99_ms << " ms";
  std::printf("%d clients: goodput %.1f/s (reference %.1f), p99 %.0f ms, %d answered, %d refused\n",
              clients, r.goodput_per_s, reference, r.p99_ms, r.answered, r.refused);
}

// The reported collapse, on a model of the engine: steps of 4 ms + 0.5 ms per sentence in
// flight, JFLEG-like lengths, closed loops that re-send refusals at once. The best a fixed
// concurrency does within the objective is the reference; admission must keep every loop from
// 8 to 1,024 clients near it, with the admitted p99 inside the objective.
TEST_F(AdmissionTest, ClosedLoopsOfAnySizeKeepGoodputAndTheObjective) {
  const milliseconds objective(1000);
  // The reference for a loop of N: without admission (an objective of an hour), the best that
  // a fixed concurrency of at most N does with its p99 within the objective.
  std::vector<std::pair<int, double>> fixed;  // concurrency, goodput
  for (int clients : {2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48}) {
    AdmissionController unlimited = Make(1 << 20, 3'600'000);
    BatchingEngine engine(microseconds(4000), microseconds(500));
    const LoadResult r =
        ClosedLoop({&unlimited}, engine, now_us_, clients, milliseconds(12'000), objective);
    if (r.p99_ms <= 1000) fixed.emplace_back(clients, r.goodput_per_s);
  }
  ASSERT_FALSE(fixed.empty());
  for (int clients : {8, 16, 64, 256, 1024}) {
    double reference = 0;
    for (const auto& [concurrency, goodput] : fixed) {
      if (concurrency <= clients) reference = std::max(reference, goodput);
    }
    AdmissionController admission = Make(1024, 1000);
    BatchingEngine engine(microseconds(4000), microseconds(500));
    const LoadResult r =
        ClosedLoop({&admission}, engine, now_us_, clients, milliseconds(12'000), objective);
    ExpectKeepsGoodputAndTheObjective(r, clients, reference);
  }
}

// What the shared segment carries between the processes: the engine's step line, and what each
// worker holds.
struct Board {
  EngineLoad step;
  std::vector<int> admitted;
};

class SharedEngineTest : public AdmissionTest {
 protected:
  // `workers` controllers over one engine of steps `base` + `per_sentence` * n, as gecd serve
  // runs them: each told the engine's measured line and the others' counts.
  std::vector<std::unique_ptr<AdmissionController>> Workers(int workers, microseconds base,
                                                            microseconds per_sentence,
                                                            int slo_ms = 1000) {
    board_.step = {.step_fixed_us = static_cast<double>(base.count()),
                   .step_per_sequence_us = static_cast<double>(per_sentence.count()),
                   .others_admitted = 0};
    board_.admitted.assign(workers, 0);
    std::vector<std::unique_ptr<AdmissionController>> out;
    for (int w = 0; w < workers; ++w) {
      out.push_back(std::make_unique<AdmissionController>(
          AdmissionController::Options{
              .max_in_flight = 1024,
              .slo = milliseconds(slo_ms),
              .max_batch_size = 128,
              .engine_load =
                  [this, w] {
                    EngineLoad load = board_.step;
                    for (int o = 0; o < std::ssize(board_.admitted); ++o) {
                      if (o != w) load.others_admitted += board_.admitted[o];
                    }
                    return load;
                  },
              .publish_in_flight = [this, w](int n) { board_.admitted[w] = n; }},
          [this] { return now_us_; }));
    }
    return out;
  }
  static std::vector<AdmissionController*> Pointers(
      const std::vector<std::unique_ptr<AdmissionController>>& workers) {
    std::vector<AdmissionController*> out;
    for (const auto& w : workers) out.push_back(w.get());
    return out;
  }
  // The best goodput a fixed concurrency of at most `clients` reaches with its p99 within the
  // objective, without admission.
  double Reference(int clients, microseconds base, microseconds per_sentence,
                   int tokens_per_step = 1) {
    double best = 0;
    for (int c : {2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 128}) {
      if (c > clients) break;
      AdmissionController unlimited = Make(1 << 20, 3'600'000);
      BatchingEngine engine(base, per_sentence, tokens_per_step);
      const LoadResult r =
          ClosedLoop({&unlimited}, engine, now_us_, c, milliseconds(12'000), milliseconds(1000));
      if (r.p99_ms <= 1000) best = std::max(best, r.goodput_per_s);
    }
    return best;
  }

  Board board_;
};

// The engine as measured on the CPU default (7 ms + 0.42 ms per sequence: mostly fixed), two
// workers: closed loops of any size keep their goodput and the objective, as with one worker and
// a proportional engine above.
TEST_F(SharedEngineTest, TwoWorkersKeepGoodputAndTheObjectiveOnAMostlyFixedStep) {
  const microseconds base(7000), per_sentence(420);
  for (int clients : {8, 16, 64, 256, 1024}) {
    const double reference = Reference(clients, base, per_sentence);
    auto workers = Workers(2, base, per_sentence);
    BatchingEngine engine(base, per_sentence);
    const LoadResult r = ClosedLoop(Pointers(workers), engine, now_us_, clients,
                                    milliseconds(12'000), milliseconds(1000));
    ExpectKeepsGoodputAndTheObjective(r, clients, reference);
  }
}

// A speculating engine (4 tokens per sequence-step, as aggressive decoding gives on JFLEG): a
// sentence takes a quarter of the steps. Told so by the engine, admission keeps goodput and the
// objective; charging one step per token, it held its sentences to a third of the objective and
// lost a quarter of the goodput.
TEST_F(SharedEngineTest, ASpeculatingEnginesTokensPerStepAreCounted) {
  const microseconds base(7000), per_sentence(420);
  for (int clients : {16, 64, 256}) {
    const double reference = Reference(clients, base, per_sentence, /*tokens_per_step=*/4);
    auto workers = Workers(2, base, per_sentence);
    board_.step.tokens_per_step = 4;
    BatchingEngine engine(base, per_sentence, 4);
    const LoadResult r = ClosedLoop(Pointers(workers), engine, now_us_, clients,
                                    milliseconds(12'000), milliseconds(1000));
    ExpectKeepsGoodputAndTheObjective(r, clients, reference);
    if (clients != 64) continue;
    // The same engine, its tokens per step unknown to admission.
    auto blind = Workers(2, base, per_sentence);
    BatchingEngine same(base, per_sentence, 4);
    const LoadResult b = ClosedLoop(Pointers(blind), same, now_us_, clients, milliseconds(12'000),
                                    milliseconds(1000));
    std::printf("  blind: goodput %.1f/s, p99 %.0f ms\n", b.goodput_per_s, b.p99_ms);
    EXPECT_LT(b.goodput_per_s, 0.85 * r.goodput_per_s);
  }
}

// `rate` sentences per second arriving evenly for `duration` (the first quarter not counted),
// refusals not re-sent: what a load test's find-max trial sends.
LoadResult OpenLoop(const std::vector<AdmissionController*>& workers, BatchingEngine& engine,
                    int64_t& now_us, double rate, milliseconds duration, milliseconds objective) {
  const int64_t start_us = now_us;
  Tally tally(now_us, duration, objective);
  const double gap_us = 1e6 / rate;
  uint64_t next = 0;
  auto arrival = [&](uint64_t i) { return start_us + static_cast<int64_t>(gap_us * i); };
  while (true) {
    const bool more = arrival(next) < tally.end_us();
    if (engine.busy() && (!more || engine.step_end_us() <= arrival(next))) {
      EndStep(workers, engine, now_us, tally);
      continue;
    }
    if (!more) break;
    now_us = arrival(next);
    const int worker = static_cast<int>(next % workers.size());
    if (!Arrive(workers, worker, engine, Mix(next++), now_us, /*client=*/0)) tally.Refused(now_us);
  }
  return tally.Result();
}

// The highest open-loop rate from `from` up to `to` in steps of `step` whose p99 without
// admission is within the objective over 20 s, on engines `make_engine` makes: what a load
// test's find-max measures.
double Capacity(int64_t& now_us, const std::function<BatchingEngine()>& make_engine, double from,
                double to, double step) {
  double capacity = 0;
  for (double rate = from; rate <= to; rate += step) {
    AdmissionController unlimited({.max_in_flight = 1 << 20, .slo = milliseconds(3'600'000)},
                                  [&now_us] { return now_us; });
    BatchingEngine engine = make_engine();
    if (OpenLoop({&unlimited}, engine, now_us, rate, milliseconds(20'000), milliseconds(1000))
            .p99_ms > 1000) {
      break;
    }
    capacity = rate;
  }
  return capacity;
}

// The engine as the box runs it under overload: its batch capped (128 sentences a step, the rest
// waiting in order) and its sentences' steps varying as speculation makes them (2 to 6 tokens a
// step, 4 on average: a sentence with edits copies less). Past capacity (the highest rate whose
// p99 without admission is within the objective), admission keeps the admitted p99 within it
// and serves at least that rate within it. (With the late mark this model's p99 is 723-833 ms,
// without it 810-899: its late bursts are milder than the box's, where the mark took the admitted
// p99 from 1.03-1.14 s to 0.99-1.01 s at 1.2x; session 24.)
TEST_F(SharedEngineTest, PastCapacityACappedBatchOfVaryingSentencesKeepsTheObjective) {
  const microseconds base(7000), per_sentence(420);
  const milliseconds objective(1000);
  const auto engine = [&] {
    return BatchingEngine(base, per_sentence, /*tokens_per_step=*/4, /*max_batch=*/128,
                          /*varying=*/true);
  };
  const double capacity = Capacity(now_us_, engine, 100, 800, 20);
  ASSERT_GT(capacity, 0);
  for (double load : {1.2, 1.5, 2.0}) {
    auto workers = Workers(2, base, per_sentence);
    board_.step.tokens_per_step = 4;
    BatchingEngine admitted = engine();
    const LoadResult r = OpenLoop(Pointers(workers), admitted, now_us_, load * capacity,
                                  milliseconds(40'000), objective);
    std::printf("%.1fx capacity %.0f/s: goodput %.1f/s, %d answered, %d refused, p99 %.0f ms\n",
                load, capacity, r.goodput_per_s, r.answered, r.refused, r.p99_ms);
    EXPECT_LE(r.p99_ms, 1000) << load << "x";
    EXPECT_GE(r.goodput_per_s, capacity) << load << "x";
  }
}

// What the engine can serve within the objective is not refused: at the highest open-loop rate
// whose p99 without admission is within the objective (what a load test's find-max measures),
// admission refuses under 1% of the calls. The proportional own-flight model refused far more
// there, because it charged every sentence the step's fixed part again.
TEST_F(SharedEngineTest, WhatTheEngineServesInTimeIsNotRefused) {
  const microseconds base(7000), per_sentence(420);
  const milliseconds objective(1000), duration(20'000);
  const double capacity = Capacity(
      now_us_, [&] { return BatchingEngine(base, per_sentence, /*tokens_per_step=*/1); }, 10, 200,
      5);
  ASSERT_GT(capacity, 0);
  auto workers = Workers(2, base, per_sentence);
  BatchingEngine engine(base, per_sentence);
  const LoadResult r = OpenLoop(Pointers(workers), engine, now_us_, capacity, duration, objective);
  std::printf("capacity %.0f/s: %d answered, %d refused, p99 %.0f ms\n", capacity, r.answered,
              r.refused, r.p99_ms);
  EXPECT_LE(r.refused, (r.answered + r.refused) / 100)
      << "at " << capacity << "/s: " << r.refused << " refused of " << r.answered + r.refused
      << "; p99 " << r.p99_ms << " ms";
  EXPECT_LE(r.p99_ms, 1000);
}

// A load test's find-max runs trials back to back: one past capacity, then the next at it. The
// trial at capacity is served as on a settled daemon: the margin the overloaded trial raised
// comes down once the answers keep in time, and does not refuse what the engine serves in time
// (on the box, session 21: the margin an overloaded trial left refused 9-16% of a rate a
// settled daemon served without a refusal).
TEST_F(SharedEngineTest, AfterAnOverloadedTrialWhatTheEngineServesInTimeIsNotRefused) {
  // A speculating engine (4 tokens per sequence-step): a busy pod, 250 answers a second.
  const microseconds base(7000), per_sentence(420);
  const milliseconds objective(1000), duration(4'000);
  const double capacity = Capacity(
      now_us_, [&] { return BatchingEngine(base, per_sentence, /*tokens_per_step=*/4); }, 50, 800,
      10);
  ASSERT_GT(capacity, 0);
  auto workers = Workers(2, base, per_sentence);
  board_.step.tokens_per_step = 4;
  BatchingEngine engine(base, per_sentence, 4);
  for (double load : {0.5, 2.0, 2.0}) {
    OpenLoop(Pointers(workers), engine, now_us_, load * capacity, duration, objective);
  }
  const double after_overload = workers[0]->margin();
  const LoadResult r = OpenLoop(Pointers(workers), engine, now_us_, capacity, duration, objective);
  std::printf("capacity %.0f/s after 2x: %d answered, %d refused, p99 %.0f ms, margin %.2f\n",
              capacity, r.answered, r.refused, r.p99_ms, after_overload);
  EXPECT_GT(after_overload, 1.0);  // the overload did raise it
  EXPECT_LE(r.refused, (r.answered + r.refused) / 100)
      << "at " << capacity << "/s: " << r.refused << " refused of " << r.answered + r.refused;
  EXPECT_LE(r.p99_ms, 1000);
}

}  // namespace
}  // namespace gecd::worker
