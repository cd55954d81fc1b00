#include "common/memory_limit.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace gecd {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kPhysical = uint64_t{16} << 30;

void WriteFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(MemoryLimit, PhysicalMemoryWithoutACgroupLimit) {
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/app.slice/memory.max", "max\n");
  const MemoryLimit limit = MemoryLimitFrom(kPhysical, root, "0::/app.slice\n");
  EXPECT_EQ(limit.bytes, kPhysical);
  EXPECT_EQ(limit.source, "physical memory");
}

TEST(MemoryLimit, TheOwnCgroupsOrAnAncestorsV2LimitWins) {
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/a/memory.max", "2147483648\n");
  WriteFile(root + "/a/b/memory.max", "4294967296\n");
  const MemoryLimit limit = MemoryLimitFrom(kPhysical, root, "0::/a/b\n");
  EXPECT_EQ(limit.bytes, uint64_t{2} << 30);
  EXPECT_THAT(limit.source, HasSubstr("/a/memory.max"));
}

TEST(MemoryLimit, AContainersNamespaceRootCarriesTheLimit) {
  // With a cgroup namespace, /proc/self/cgroup says "0::/" and the limit is the root's.
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/memory.max", "1073741824\n");
  EXPECT_EQ(MemoryLimitFrom(kPhysical, root, "0::/\n").bytes, uint64_t{1} << 30);
  EXPECT_EQ(MemoryLimitFrom(kPhysical, root, "").bytes, uint64_t{1} << 30);
}

TEST(MemoryLimit, CgroupV1MemoryController) {
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/memory/docker/x/memory.limit_in_bytes", "536870912\n");
  WriteFile(root + "/memory/memory.limit_in_bytes", "9223372036854771712\n");  // unlimited
  const MemoryLimit limit =
      MemoryLimitFrom(kPhysical, root, "5:cpu,cpuacct:/docker/x\n4:memory:/docker/x\n");
  EXPECT_EQ(limit.bytes, uint64_t{512} << 20);
  EXPECT_THAT(limit.source, HasSubstr("memory.limit_in_bytes"));
}

TEST(MemoryLimit, ALimitAbovePhysicalMemoryOrGarbageChangesNothing) {
  const std::string root = testing::MakeTempDir();
  WriteFile(root + "/a/memory.max", "99999999999999999\n");
  WriteFile(root + "/memory.max", "lots\n");
  EXPECT_EQ(MemoryLimitFrom(kPhysical, root, "0::/a\n").bytes, kPhysical);
}

TEST(MemoryLimit, ThisProcessHasOne) {
  const MemoryLimit& limit = ProcessMemoryLimit();
  EXPECT_GT(limit.bytes, uint64_t{64} << 20);
  EXPECT_FALSE(limit.source.empty());
}

TEST(MemoryLimit, MegabytesRoundDown) { EXPECT_EQ(Megabytes((uint64_t{3} << 20) + 5), "3 MB"); }

}  // namespace
}  // namespace gecd
