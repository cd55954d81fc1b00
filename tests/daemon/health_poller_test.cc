#include "daemon/health_poller.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::daemon {
namespace {

// Records what the poller sets.
class RecordingHealth : public grpc::HealthCheckServiceInterface {
 public:
  void SetServingStatus(const std::string&, bool serving) override { SetServingStatus(serving); }
  void SetServingStatus(bool serving) override {
    std::lock_guard lock(mu_);
    statuses_.push_back(serving);
  }
  std::vector<bool> statuses() {
    std::lock_guard lock(mu_);
    return statuses_;
  }
  // Waits up to 10 s for the last status set to be `serving`.
  bool WaitFor(bool serving) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::vector<bool> s = statuses();
      if (!s.empty() && s.back() == serving) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<bool> statuses_;
};

TEST(HealthPollerTest, FollowsTheSubjectBothWays) {
  RecordingHealth health;
  std::atomic<bool> ready{false};
  HealthPoller poller(&health, {.ready = [&] { return ready.load(); }},
                      std::chrono::milliseconds(1));
  EXPECT_EQ(health.statuses(), std::vector<bool>{false});
  ready = true;
  EXPECT_TRUE(health.WaitFor(true));
  ready = false;
  EXPECT_TRUE(health.WaitFor(false));
}

// A change between the status set at construction and the loop's first poll is published:
// the loop once read the subject again when its thread started, and a subject that became
// ready in between (a late thread on a loaded machine) stayed NOT_SERVING for good.
TEST(HealthPollerTest, AChangeBeforeTheLoopStartsIsPublished) {
  RecordingHealth health;
  std::atomic<int> calls{0};
  HealthPoller poller(&health, {.ready = [&] { return calls.fetch_add(1) > 0; }},
                      std::chrono::milliseconds(1));
  EXPECT_TRUE(health.WaitFor(true));
  EXPECT_EQ(health.statuses().front(), false);
}

}  // namespace
}  // namespace gecd::daemon
