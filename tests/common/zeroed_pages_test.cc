#include "common/zeroed_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gecd {
namespace {

// Pages of the mapping that have been touched (mincore: resident).
size_t ResidentPages(const ZeroedPages& pages) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((pages.size() + page - 1) / page);
  if (mincore(pages.as<void>(), pages.size(), vec.data()) != 0) return SIZE_MAX;
  size_t resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return resident;
}

TEST(ZeroedPagesTest, ReadsAsZerosAndTouchesNoPageUntilUsed) {
  constexpr size_t kBytes = 64 << 20;
  absl::StatusOr<ZeroedPages> pages = ZeroedPages::Map(kBytes);
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_EQ(pages->size(), kBytes);
  EXPECT_EQ(ResidentPages(*pages), 0u);
  float* f = pages->as<float>();
  f[12345] = 1.5f;
  EXPECT_EQ(ResidentPages(*pages), 1u);
  EXPECT_EQ(f[0], 0.0f);
  EXPECT_EQ(f[kBytes / sizeof(float) - 1], 0.0f);
  EXPECT_EQ(f[12345], 1.5f);
}

TEST(ZeroedPagesTest, MovesOwnership) {
  absl::StatusOr<ZeroedPages> pages = ZeroedPages::Map(1 << 20);
  ASSERT_TRUE(pages.ok());
  pages->as<int32_t>()[7] = 42;
  ZeroedPages moved = *std::move(pages);
  EXPECT_EQ(moved.as<int32_t>()[7], 42);
  ZeroedPages assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.as<int32_t>()[7], 42);
  EXPECT_EQ(assigned.size(), 1u << 20);
  EXPECT_EQ(moved.size(), 0u);  // NOLINT(bugprone-use-after-move): the moved-from state
}

TEST(ZeroedPagesTest, AnImpossibleSizeIsResourceExhaustedNamingIt) {
  absl::StatusOr<ZeroedPages> pages = ZeroedPages::Map(size_t{1} << 62);
  ASSERT_FALSE(pages.ok());
  EXPECT_EQ(pages.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(pages.status().message().find(std::to_string(size_t{1} << 62)), std::string::npos);
}

}  // namespace
}  // namespace gecd
