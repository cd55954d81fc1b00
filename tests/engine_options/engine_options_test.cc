#include "engine_options/engine_options.h"

#include <string>

#include "common/cpu_limit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scoped_env.h"

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

// The start-up line says how OpenMP's threads wait, as the engine's environment sets it
// (which variables count: common/openmp_wait_test.cc).
TEST(EngineOptionsTest, TheStartUpLineSaysHowOpenMpThreadsWait) {
  const EngineSection engine;
  {
    testing::ScopedEnv policy("OMP_WAIT_POLICY", nullptr);
    testing::ScopedEnv spin("GOMP_SPINCOUNT", "");
    EXPECT_THAT(DescribeComputeThreads(engine),
                HasSubstr("; OpenMP's threads wait as libgomp's default"));
  }
  testing::ScopedEnv policy("OMP_WAIT_POLICY", "passive");
  testing::ScopedEnv spin("GOMP_SPINCOUNT", "10000");
  EXPECT_THAT(DescribeComputeThreads(engine),
              HasSubstr("; OpenMP's threads wait as OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=10000"));
}

}  // namespace
}  // namespace gecd::config
