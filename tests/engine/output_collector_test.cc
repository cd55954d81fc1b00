#include "engine/output_collector.h"

#include <vector>

#include "gtest/gtest.h"

namespace gecd::engine {
namespace {

TEST(OutputCollectorTest, AStopTokenEndsTheOutputWithoutBeingPartOfIt) {
  OutputCollector outputs;
  EXPECT_FALSE(outputs.Add({.id = 1, .token = 10}));
  EXPECT_FALSE(outputs.Add({.id = 2, .token = 20}));
  EXPECT_TRUE(
      outputs.Add({.id = 1, .token = 99, .finished = true, .reason = FinishReason::kStopToken}));
  EXPECT_EQ(outputs.Take(1), (std::vector<int32_t>{10}));
  // The length limit's last token is output.
  EXPECT_TRUE(
      outputs.Add({.id = 2, .token = 21, .finished = true, .reason = FinishReason::kLength}));
  EXPECT_EQ(outputs.Take(2), (std::vector<int32_t>{20, 21}));
  // Taken outputs are forgotten.
  EXPECT_TRUE(outputs.Take(1).empty());
}

}  // namespace
}  // namespace gecd::engine
