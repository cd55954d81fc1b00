#include "common/assert.h"

#include <csignal>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "gtest/gtest.h"

namespace gecd {
namespace {

// The message of a check that holds is never built.
std::string CountedMessage(int* built) {
  ++*built;
  return "never shown";
}

TEST(ReleaseAssert, PassesWithoutBuildingTheMessage) {
  int built = 0;
  GECD_RELEASE_ASSERT(2 + 2 == 4, CountedMessage(&built));
  EXPECT_EQ(built, 0);
}

TEST(ReleaseAssertDeathTest, LogsWhereAndWhyThenAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // As gecd serve's processes do: the line goes through the process's logger.
        ASSERT_TRUE(SetUpLogging("test", "info", "text").ok());
        const int id = 7;
        GECD_RELEASE_ASSERT(id < 0, absl::StrCat("sequence ", id, " is unknown"));
      },
      testing::KilledBySignal(SIGABRT),
      "\\[critical\\] \\[test [0-9]+\\] .*assert_test\\.cc:[0-9]+: assertion failed: "
      "id < 0: sequence 7 is unknown");
}

#ifdef NDEBUG
TEST(DebugAssert, EvaluatesNothingWithNdebug) {
  int evaluated = 0;
  int built = 0;
  GECD_ASSERT(++evaluated == 0, CountedMessage(&built));
  EXPECT_EQ(evaluated, 0);
  EXPECT_EQ(built, 0);
}
#else
TEST(DebugAssertDeathTest, AbortsWithoutNdebug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(GECD_ASSERT(1 > 2, "debug check"), "assertion failed: 1 > 2: debug check");
}
#endif

}  // namespace
}  // namespace gecd
