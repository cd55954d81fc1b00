#include "route/dns_source.h"

#include <condition_variable>
#include <mutex>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::route {
namespace {

TEST(DnsSourceTest, ResolvesEveryAddressOfTheName) {
  absl::StatusOr<std::vector<std::string>> v4 = ResolveAll("127.0.0.1", "50051");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_THAT(*v4, ::testing::ElementsAre("127.0.0.1:50051"));
  absl::StatusOr<std::vector<std::string>> v6 = ResolveAll("::1", "7");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_THAT(*v6, ::testing::ElementsAre("[::1]:7"));
}

TEST(DnsSourceTest, ReportsTheSetAndCountsFailures) {
  DiscoveryCounters counters;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<DiscoveredEndpoint>> reports;
  {
    DnsSource source("localhost", 50051, std::chrono::milliseconds(20), &counters);
    ASSERT_TRUE(source
                    .Start([&](std::vector<DiscoveredEndpoint> e) {
                      std::lock_guard lock(mu);
                      reports.push_back(std::move(e));
                      cv.notify_all();
                    })
                    .ok());
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return !reports.empty(); }));
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // several refreshes
  }
  // The same answer each refresh: reported once.
  ASSERT_EQ(reports.size(), 1u);
  ASSERT_FALSE(reports[0].empty());
  for (const auto& e : reports[0]) {
    EXPECT_THAT(e.address, ::testing::AnyOf("127.0.0.1:50051", "[::1]:50051"));
  }
  EXPECT_EQ(counters.errors.load(), 0u);

  DiscoveryCounters failing;
  {
    DnsSource source("no-such-host.invalid", 1, std::chrono::milliseconds(20), &failing);
    ASSERT_TRUE(source.Start([&](std::vector<DiscoveredEndpoint>) { ADD_FAILURE(); }).ok());
    for (int i = 0; i < 500 && failing.errors.load() < 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  EXPECT_GE(failing.errors.load(), 2u);
}

}  // namespace
}  // namespace gecd::route
