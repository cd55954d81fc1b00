#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/run_gecd.h"

namespace gecd::cli {
namespace {

// `gecd correct` against a daemon on the echo backend (its answer is the text as sent, so the
// output's shape is what is checked, not a correction).
TEST(CorrectCommandTest, PrintsTheTextAndExitsNonZeroWithTheStatusOnAnError) {
  testing::DaemonProcess daemon;
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  const std::string server = absl::StrCat("--server ", daemon.grpc_target());

  testing::RunResult plain =
      testing::RunGecd(absl::StrCat("correct ", server, " 'She goes home.' 'It is fine.' | cat"));
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(testing::Lines(plain.output).at(0), "She goes home. It is fine.") << plain.output;

  testing::RunResult json =
      testing::RunGecd(absl::StrCat("correct ", server, " --json 'One. Two.'"));
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_TRUE(absl::StrContains(json.output, "\"corrected_text\":\"One. Two.\"")) << json.output;
  EXPECT_TRUE(absl::StrContains(json.output, "\"sentences\"")) << json.output;

  testing::RunResult from_stdin =
      testing::RunGecd(absl::StrCat("correct ", server, " < /dev/null"));
  EXPECT_EQ(from_stdin.exit_code, 1) << from_stdin.output;
  EXPECT_TRUE(absl::StrContains(from_stdin.output, "code 3: text is empty")) << from_stdin.output;

  testing::RunResult both = testing::RunGecd("correct --file x 'text'");
  EXPECT_EQ(both.exit_code, 2) << both.output;
}

}  // namespace
}  // namespace gecd::cli
