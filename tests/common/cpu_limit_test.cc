#include "common/cpu_limit.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace gecd {
namespace {

using ::testing::HasSubstr;

void WriteFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(CpuLimit, TheAffinityWithoutAQuota) {
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/app.slice/cpu.max", "max 100000\n");
  const CpuLimit limit = CpuLimitFrom(16, root, "0::/app.slice\n");
  EXPECT_EQ(limit.cpus, 16);
  EXPECT_EQ(limit.source, "affinity");
  EXPECT_EQ(ComputeThreads(limit), 16);
}

// Kubernetes' limits.cpu: "2" on the pod's cgroup, a looser one on a parent.
TEST(CpuLimit, TheSmallestV2QuotaOfTheCgroupAndItsAncestorsWins) {
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/kubepods/cpu.max", "800000 100000\n");
  WriteFile(root + "/kubepods/pod1/cpu.max", "200000 100000\n");
  WriteFile(root + "/kubepods/pod1/c1/cpu.max", "max 100000\n");
  const CpuLimit limit = CpuLimitFrom(64, root, "0::/kubepods/pod1/c1\n");
  EXPECT_EQ(limit.cpus, 2);
  EXPECT_THAT(limit.source, HasSubstr("/kubepods/pod1/cpu.max"));
  EXPECT_EQ(ComputeThreads(limit), 2);
}

TEST(CpuLimit, AContainersNamespaceRootCarriesTheQuota) {
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/cpu.max", "150000 100000\n");
  const CpuLimit limit = CpuLimitFrom(8, root, "");  // no /proc/self/cgroup line
  EXPECT_EQ(limit.cpus, 1.5);
  EXPECT_EQ(ComputeThreads(limit), 1);  // half a CPU more would be throttled, not used
}

TEST(CpuLimit, CgroupV1CfsQuota) {
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
  WriteFile(root + "/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  WriteFile(root + "/cpu,cpuacct/docker/cpu.cfs_quota_us", "-1\n");
  WriteFile(root + "/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
  const CpuLimit limit =
      CpuLimitFrom(32, root, "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n");
  EXPECT_EQ(limit.cpus, 3);
  EXPECT_THAT(limit.source, HasSubstr("cpu,cpuacct/docker/abc/cpu.cfs_quota_us"));
}

TEST(CpuLimit, AQuotaAboveTheAffinityLeavesTheAffinity) {
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/a/cpu.max", "400000 100000\n");
  EXPECT_EQ(CpuLimitFrom(2, root, "0::/a\n").cpus, 2);
}

TEST(CpuLimit, UnreadableOrMalformedFilesSetNoQuota) {
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/a/cpu.max", "lots\n");
  WriteFile(root + "/a/b/cpu.max", "0 100000\n");
  const CpuLimit limit = CpuLimitFrom(4, root, "0::/a/b/c\n");  // c has no file at all
  EXPECT_EQ(limit.cpus, 4);
  EXPECT_EQ(limit.source, "affinity");
}

// Issue 24: a cpu engine keeps every core busy, and each worker process's gRPC threads take CPU
// from it; a GPU's or the echo engine leaves the CPUs to the front end.
TEST(CpuLimit, WorkersByDefaultAreOnePerFourCoresBesideACpuEngine) {
  EXPECT_EQ(DefaultWorkers(1, true), 1);
  EXPECT_EQ(DefaultWorkers(2, true), 1);
  EXPECT_EQ(DefaultWorkers(7, true), 1);
  EXPECT_EQ(DefaultWorkers(8, true), 2);
  EXPECT_EQ(DefaultWorkers(64, true), 16);
  EXPECT_EQ(DefaultWorkers(1, false), 1);
  EXPECT_EQ(DefaultWorkers(2, false), 2);
  EXPECT_EQ(DefaultWorkers(64, false), 64);
}

TEST(CpuLimit, ThisProcessGetsAtLeastOneComputeThread) {
  EXPECT_GT(ProcessCpuLimit().cpus, 0);
  EXPECT_GE(ComputeThreads(ProcessCpuLimit()), 1);
}

}  // namespace
}  // namespace gecd
