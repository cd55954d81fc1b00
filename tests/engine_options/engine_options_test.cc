#include "engine_options/engine_options.h"

#include "common/cpu_limit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::config {
namespace {

using ::testing::HasSubstr;

TEST(EngineOptionsTest, EngineThreadsAsSetOrTheCpusTheProcessMayUse) {
  EngineSection engine;
  engine.threads = 3;
  EXPECT_EQ(ComputeThreadsFor(engine), 3);
  EXPECT_EQ(CpuBackendOptionsFrom(engine).threads, 3);
  EXPECT_THAT(DescribeComputeThreads(engine), HasSubstr("3 compute threads (engine.threads)"));
  engine.threads = 0;
  EXPECT_EQ(ComputeThreadsFor(engine), ComputeThreads(ProcessCpuLimit()));
  EXPECT_EQ(CpuBackendOptionsFrom(engine).threads, ComputeThreads(ProcessCpuLimit()));
  EXPECT_THAT(DescribeComputeThreads(engine), HasSubstr(ProcessCpuLimit().source));
}

}  // namespace
}  // namespace gecd::config
