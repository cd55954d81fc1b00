#include "daemon/client_counters.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::daemon {
namespace {

using ::testing::HasSubstr;

TEST(ClientCountersTest, CountsByNameWithOtherPastTheSlots) {
  auto a = std::make_unique<ClientCounters>();
  auto b = std::make_unique<ClientCounters>();
  a->Add("frontend", 0);
  a->Add("frontend", 0);
  b->Add("frontend", 0);
  b->Add("frontend", 8);
  b->Add("jobs", 0);
  for (int i = 0; i < ClientCounters::kMaxClients + 2; ++i) a->Add(absl::StrCat("c", i), 0);
  ClientTotals totals;
  a->SumInto(totals);
  b->SumInto(totals);
  EXPECT_EQ(totals.at("frontend")[0], 3u);
  EXPECT_EQ(totals.at("frontend")[8], 1u);
  EXPECT_EQ(totals.at("jobs")[0], 1u);
  // frontend holds one of a's slots: c0..c14 get the rest, c15..c17 count as other.
  EXPECT_EQ(totals.at("c14")[0], 1u);
  EXPECT_EQ(totals.count("c15"), 0u);
  EXPECT_EQ(totals.at("other")[0], 3u);

  std::string out;
  AppendClientTotals(out, "x_total", "help", totals);
  EXPECT_THAT(out, HasSubstr("# TYPE x_total counter\n"));
  EXPECT_THAT(out, HasSubstr("x_total{client=\"frontend\",code=\"OK\"} 3\n"));
  EXPECT_THAT(out, HasSubstr("x_total{client=\"frontend\",code=\"RESOURCE_EXHAUSTED\"} 1\n"));
  std::string none;
  AppendClientTotals(none, "x_total", "help", {});
  EXPECT_EQ(none, "");
}

// Threads adding the same new names at once lose no count (a name may take two slots).
TEST(ClientCountersTest, ConcurrentWritersLoseNothing) {
  auto counters = std::make_unique<ClientCounters>();
  constexpr int kPerThread = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) counters->Add(t % 2 == 0 ? "even" : "odd", 0);
    });
  }
  for (std::thread& t : threads) t.join();
  ClientTotals totals;
  counters->SumInto(totals);
  EXPECT_EQ(totals.at("even")[0], 2u * kPerThread);
  EXPECT_EQ(totals.at("odd")[0], 2u * kPerThread);
}

}  // namespace
}  // namespace gecd::daemon
