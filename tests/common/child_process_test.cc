#include "common/child_process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd {
namespace {

using std::chrono::milliseconds;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr milliseconds kExitTimeout(10'000);

ChildProcessOptions Shell(const std::string& script) {
  ChildProcessOptions options;
  options.executable = "/bin/sh";
  options.argv = {"sh", "-c", script};
  options.env = ProcessEnvironment({}, {});
  return options;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ChildProcessTest, WaitChildExitReturnsTheExitCode) {
  absl::StatusOr<pid_t> pid = SpawnProcess(Shell("exit 3"));
  ASSERT_TRUE(pid.ok()) << pid.status();
  const std::optional<int> status = WaitChildExit(*pid, kExitTimeout);
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 3);
  EXPECT_EQ(DescribeWaitStatus(*status), "exited with code 3");
}

// The child's nice value, as its exit code (coreutils' `nice` prints it).
int ChildNice(int increment) {
  ChildProcessOptions options = Shell("exit $(nice)");
  options.nice_increment = increment;
  absl::StatusOr<pid_t> pid = SpawnProcess(options);
  if (!pid.ok()) return -100;
  const std::optional<int> status = WaitChildExit(*pid, kExitTimeout);
  return status.has_value() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -100;
}

TEST(ChildProcessTest, ANiceIncrementLowersTheChildsPriorityAndOnlyItsOwn) {
  errno = 0;
  const int own = getpriority(PRIO_PROCESS, 0);
  ASSERT_EQ(errno, 0);
  if (own > 14) GTEST_SKIP() << "this test runs at nice " << own << ": no room for +5";
  EXPECT_EQ(ChildNice(0), own);
  EXPECT_EQ(ChildNice(5), own + 5);
  EXPECT_EQ(ChildNice(40), 19);  // clamped, not refused
  EXPECT_EQ(getpriority(PRIO_PROCESS, 0), own);
}

TEST(ChildProcessTest, WaitChildExitIsNulloptWhileTheChildRuns) {
  absl::StatusOr<pid_t> pid = SpawnProcess(Shell("sleep 30"));
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_FALSE(WaitChildExit(*pid, milliseconds(0)).has_value());
  kill(*pid, SIGKILL);
  const std::optional<int> status = WaitChildExit(*pid, kExitTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_THAT(DescribeWaitStatus(*status), HasSubstr("killed by signal 9"));
}

TEST(ChildProcessTest, TheLogFileTakesStdoutAndStderrAndTheEnvironmentIsTheGivenOne) {
  const std::string log = ::testing::TempDir() + "/child_process_test.log";
  ChildProcessOptions options = Shell("echo out $GECD_CHILD_TEST; echo err >&2");
  options.env = ProcessEnvironment({}, {"GECD_CHILD_TEST=given"});
  options.log_path = log;
  absl::StatusOr<pid_t> pid = SpawnProcess(options);
  ASSERT_TRUE(pid.ok()) << pid.status();
  ASSERT_TRUE(WaitChildExit(*pid, kExitTimeout).has_value());
  EXPECT_EQ(ReadFile(log), "out given\nerr\n");
  std::remove(log.c_str());
}

TEST(ChildProcessTest, AnExecFailureExits127) {
  ChildProcessOptions options;
  options.executable = "/nonexistent/gecd-child";
  options.argv = {"gecd-child"};
  options.log_path = ::testing::TempDir() + "/child_process_exec.log";
  absl::StatusOr<pid_t> pid = SpawnProcess(options);
  ASSERT_TRUE(pid.ok()) << pid.status();
  const std::optional<int> status = WaitChildExit(*pid, kExitTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(DescribeWaitStatus(*status), "exited with code 127");
  EXPECT_THAT(ReadFile(options.log_path), HasSubstr("cannot run /nonexistent/gecd-child: "));
  std::remove(options.log_path.c_str());
}

TEST(ChildProcessTest, AnUnwritableLogIsPermissionDenied) {
  ChildProcessOptions options = Shell("exit 0");
  options.log_path = "/nonexistent/dir/child.log";
  EXPECT_EQ(SpawnProcess(options).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(ChildProcessTest, ProcessEnvironmentDropsNamedVariablesAndAppendsTheSetOnes) {
  ASSERT_EQ(setenv("GECD_CHILD_DROP", "1", 1), 0);
  ASSERT_EQ(setenv("GECD_CHILD_DROP_LONGER", "2", 1), 0);
  const std::vector<std::string> env =
      ProcessEnvironment({"GECD_CHILD_DROP"}, {"GECD_CHILD_SET=3"});
  EXPECT_THAT(env, Not(Contains("GECD_CHILD_DROP=1")));
  EXPECT_THAT(env, Contains("GECD_CHILD_DROP_LONGER=2"));  // a prefix alone does not drop
  ASSERT_FALSE(env.empty());
  EXPECT_EQ(env.back(), "GECD_CHILD_SET=3");
  unsetenv("GECD_CHILD_DROP");
  unsetenv("GECD_CHILD_DROP_LONGER");
}

}  // namespace
}  // namespace gecd
