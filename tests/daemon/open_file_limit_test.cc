#include "daemon/open_file_limit.h"

#include <sys/resource.h>

#include "gtest/gtest.h"

namespace gecd::daemon {
namespace {

TEST(OpenFileLimitTest, RaisesTheSoftLimitToTheHardOne) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  // Start below the hard limit, as a default 1024 soft limit does.
  const rlim_t low = limit.rlim_max > 64 ? limit.rlim_max / 2 : limit.rlim_max;
  rlimit lowered{low, limit.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);

  absl::StatusOr<OpenFileLimit> raised = RaiseOpenFileLimit();
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->before, low);
  EXPECT_EQ(raised->after, limit.rlim_max);
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, limit.rlim_max);

  raised = RaiseOpenFileLimit();  // already there: nothing to do
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->before, limit.rlim_max);
  EXPECT_EQ(raised->after, limit.rlim_max);
}

}  // namespace
}  // namespace gecd::daemon
