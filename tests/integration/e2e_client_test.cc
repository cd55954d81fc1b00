// Runs tests/e2e/client_test.py (Debian's python3-grpcio, stubs generated from our proto)
// against the real daemon: edits applied to the input give corrected_text, streams answer by
// id, invalid input is INVALID_ARGUMENT, health and reflection answer. The script exits 77 when
// grpc or the protoc plugin is missing, which skips this test.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/test_paths.h"

namespace gecd::supervisor {
namespace {

using std::chrono::milliseconds;

constexpr char kPython[] = "/usr/bin/python3";
constexpr milliseconds kScriptTimeout(120'000);

TEST(E2eClientTest, PythonGrpcClientAgainstTheDaemon) {
  if (access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " not installed";
  testing::DaemonProcess daemon({"engine.backend=cpu", "model.max_output_tokens=24"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();

  const std::string script = testing::SourceDir() + "/tests/e2e/client_test.py";
  const std::string output = testing::MakeTempDir() + "/client_test.out";
  const std::string target = daemon.grpc_target();
  const pid_t pid = fork();
  if (pid == 0) {
    if (std::freopen(output.c_str(), "w", stdout) == nullptr) _exit(126);
    dup2(fileno(stdout), STDERR_FILENO);
    execl(kPython, kPython, script.c_str(), target.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  const bool exited =
      testing::WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, kScriptTimeout);
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "client_test.py still running after " << kScriptTimeout.count() << " ms\n"
           << testing::ReadWholeFile(output);
  }
  const std::string log = testing::ReadWholeFile(output);
  ASSERT_TRUE(WIFEXITED(status)) << status << "\n" << log;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << log;
  EXPECT_EQ(WEXITSTATUS(status), 0) << log << daemon.log();
  std::printf("%s", log.c_str());
}

}  // namespace
}  // namespace gecd::supervisor
