#include "engine_options/engine_options.h"

#include <cstdlib>
#include <string>
#include <utility>

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

// The start-up line says how OpenMP's threads wait, as the engine's environment sets it.
TEST(EngineOptionsTest, TheStartUpLineSaysHowOpenMpThreadsWait) {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const std::string saved_policy = policy == nullptr ? "" : policy;
  const std::string saved_spin = spin == nullptr ? "" : spin;
  const EngineSection engine;
  unsetenv("OMP_WAIT_POLICY");
  unsetenv("GOMP_SPINCOUNT");
  EXPECT_THAT(DescribeComputeThreads(engine),
              HasSubstr("; OpenMP's threads wait as libgomp's default"));
  setenv("GOMP_SPINCOUNT", "10000", 1);
  EXPECT_THAT(DescribeComputeThreads(engine), HasSubstr("wait as GOMP_SPINCOUNT=10000"));
  setenv("OMP_WAIT_POLICY", "passive", 1);
  setenv("GOMP_SPINCOUNT", "", 1);  // empty: as if unset
  EXPECT_THAT(DescribeComputeThreads(engine), HasSubstr("wait as OMP_WAIT_POLICY=passive"));
  EXPECT_THAT(DescribeComputeThreads(engine), ::testing::Not(HasSubstr("GOMP_SPINCOUNT")));
  for (const auto& [name, saved] :
       {std::pair<const char*, std::string>{"OMP_WAIT_POLICY", saved_policy},
        {"GOMP_SPINCOUNT", saved_spin}}) {
    if (saved.empty()) {
      unsetenv(name);
    } else {
      setenv(name, saved.c_str(), 1);
    }
  }
}

}  // namespace
}  // namespace gecd::config
