#include "server/admission.h"

#include <chrono>
#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::server {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Refusal = AdmissionController::Refusal;

constexpr auto kNone = AdmissionController::kNoDeadline;

class AdmissionTest : public ::testing::Test {
 protected:
  AdmissionController Make(int max_in_flight, int max_queue_ms) {
    return AdmissionController(
        {.max_in_flight = max_in_flight, .max_queue = milliseconds(max_queue_ms)},
        [this] { return now_us_; });
  }
  void Advance(milliseconds d) { now_us_ += d.count() * 1000; }

  // `completions` sentences one after another over `busy`: completions / busy per second.
  void Measure(AdmissionController& admission, int completions, milliseconds busy) {
    for (int i = 0; i < completions; ++i) {
      ASSERT_TRUE(admission.Admit(kNone).admitted());
      Advance(busy / completions);
      admission.Release();
    }
  }

  int64_t now_us_ = 1'000'000;
};

TEST_F(AdmissionTest, ColdStartAdmitsUpToMaxInFlight) {
  AdmissionController admission = Make(8, 800);
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(admission.Admit(milliseconds(1)).admitted()) << i;
  const AdmissionController::Decision refused = admission.Admit(kNone);
  EXPECT_EQ(refused.refusal, Refusal::kMaxInFlight);
  EXPECT_THAT(refused.message, HasSubstr("server.max_in_flight 8"));
  EXPECT_EQ(admission.in_flight(), 8);
  admission.Release();
  EXPECT_TRUE(admission.Admit(kNone).admitted());
}

TEST_F(AdmissionTest, RefusesWhenThePredictedWaitExceedsMaxQueue) {
  AdmissionController admission = Make(1024, 800);
  Measure(admission, 10, milliseconds(1000));  // 10 per second
  EXPECT_DOUBLE_EQ(admission.service_rate(), 10.0);
  // A sentence behind k others waits k / 10 s: up to 8 ahead fit in 800 ms, 9 do not.
  for (int i = 0; i < 9; ++i) EXPECT_TRUE(admission.Admit(kNone).admitted()) << i;
  const AdmissionController::Decision refused = admission.Admit(kNone);
  EXPECT_EQ(refused.refusal, Refusal::kMaxQueue);
  EXPECT_THAT(refused.message, HasSubstr("predicted wait 900 ms (9 queued at 10.0/s)"));
  EXPECT_THAT(refused.message, HasSubstr("server.max_queue_ms 800"));
  EXPECT_EQ(admission.in_flight(), 9);  // the refusal holds no slot
}

TEST_F(AdmissionTest, RefusesWhenThePredictedWaitExceedsTheDeadline) {
  AdmissionController admission = Make(1024, 800);
  Measure(admission, 10, milliseconds(1000));
  ASSERT_TRUE(admission.Admit(milliseconds(250)).admitted());  // waits 0
  ASSERT_TRUE(admission.Admit(milliseconds(250)).admitted());  // 100 ms
  ASSERT_TRUE(admission.Admit(milliseconds(250)).admitted());  // 200 ms
  const AdmissionController::Decision refused = admission.Admit(milliseconds(250));
  EXPECT_EQ(refused.refusal, Refusal::kDeadline);
  EXPECT_THAT(refused.message, HasSubstr("predicted wait 300 ms"));
  EXPECT_THAT(refused.message, HasSubstr("250 ms left to the request's deadline"));
  // A call with a longer deadline still gets in.
  EXPECT_TRUE(admission.Admit(milliseconds(5000)).admitted());
}

TEST_F(AdmissionTest, NothingAheadIsAlwaysAdmitted) {
  AdmissionController admission = Make(1024, 800);
  Measure(admission, 1, milliseconds(5000));  // one sentence took 5 s: 0.2 per second
  EXPECT_TRUE(admission.Admit(milliseconds(100)).admitted());
  // Behind it, any wait is too long for the budget.
  EXPECT_EQ(admission.Admit(kNone).refusal, Refusal::kMaxQueue);
}

TEST_F(AdmissionTest, MaxQueueZeroLeavesOnlyTheDeadline) {
  AdmissionController admission = Make(1024, 0);
  Measure(admission, 10, milliseconds(1000));
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(admission.Admit(kNone).admitted()) << i;
  EXPECT_EQ(admission.Admit(milliseconds(1000)).refusal, Refusal::kDeadline);
}

TEST_F(AdmissionTest, RateFollowsTheEngineAndIgnoresIdleTime) {
  AdmissionController admission = Make(1024, 800);
  Measure(admission, 10, milliseconds(1000));
  // Idle time is not service time: a long pause leaves the estimate as it was.
  Advance(milliseconds(60'000));
  Measure(admission, 1, milliseconds(1));
  EXPECT_NEAR(admission.service_rate(), 10.0, 1e-9);
  // A faster engine raises it within a few time constants (1 s).
  for (int i = 0; i < 40; ++i) Measure(admission, 10, milliseconds(100));  // 100 per second
  EXPECT_GT(admission.service_rate(), 95.0);
  // A stalled one (nothing finishes) lowers it, so the queue it may hold shrinks.
  ASSERT_TRUE(admission.Admit(kNone).admitted());
  for (int i = 0; i < 20; ++i) {
    Advance(milliseconds(100));
    (void)admission.Admit(kNone);
  }
  EXPECT_LT(admission.service_rate(), 20.0);
  EXPECT_GT(admission.service_rate(), 0.0);
}

}  // namespace
}  // namespace gecd::server
