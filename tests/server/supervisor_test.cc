// Runs the real `gecd serve` (supervisor, engine and worker processes) and checks what an
// operator sees: process titles, the shared-memory segment, restarts, /healthz, /readyz,
// /metrics, systemd notifications, and a clean exit on SIGTERM.
#include "server/supervisor.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/test_paths.h"

namespace gecd::server {
namespace {

using std::chrono::milliseconds;

using testing::ChildrenByTitle;
using testing::Listening;
using testing::WaitFor;
using Daemon = testing::DaemonProcess;

constexpr milliseconds kStartTimeout = testing::kDaemonStartTimeout;
constexpr milliseconds kGracePeriod = Daemon::kGracePeriod;

TEST(RestartBackoffTest, GrowsOnQuickDeathsAndResetsAfterAStableRun) {
  RestartBackoff backoff;
  const milliseconds quick(10);
  EXPECT_EQ(backoff.OnExit(quick), milliseconds(0));
  EXPECT_EQ(backoff.OnExit(quick), RestartBackoff::kFirstDelay);
  EXPECT_EQ(backoff.OnExit(quick), 2 * RestartBackoff::kFirstDelay);
  EXPECT_EQ(backoff.OnExit(quick), 4 * RestartBackoff::kFirstDelay);
  for (int i = 0; i < 100; ++i) backoff.OnExit(quick);
  EXPECT_EQ(backoff.OnExit(quick), RestartBackoff::kMaxDelay);
  EXPECT_EQ(backoff.OnExit(RestartBackoff::kStableUptime), milliseconds(0));
  EXPECT_EQ(backoff.OnExit(quick), RestartBackoff::kFirstDelay);
}

TEST(SupervisorTest, TitledProcessesPrivateSegmentAndCleanSigterm) {
  Daemon daemon;
  const std::map<std::string, pid_t> children = daemon.WaitForChildren();
  EXPECT_EQ(testing::ProcessTitle(daemon.pid()), "gecd: supervisor");
  EXPECT_TRUE(children.count("gecd: engine")) << daemon.log();
  EXPECT_TRUE(children.count("gecd: worker 0")) << daemon.log();
  EXPECT_TRUE(children.count("gecd: worker 1")) << daemon.log();

  const std::string segment = daemon.SegmentPath();
  ASSERT_FALSE(segment.empty()) << daemon.log();
  struct stat st {};
  ASSERT_EQ(stat(segment.c_str(), &st), 0) << segment;
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_EQ(daemon.Get("/healthz"), 200);
  EXPECT_TRUE(WaitFor([&] { return Listening(daemon.grpc_port()); })) << daemon.log();
  ASSERT_TRUE(WaitFor([&] { return daemon.Get("/readyz") == 200; })) << daemon.log();
  std::string metrics;
  ASSERT_EQ(daemon.Get("/metrics", &metrics), 200);
  EXPECT_TRUE(absl::StrContains(metrics, "gecd_process_restarts_total{process=\"worker\"} 0\n"))
      << metrics << daemon.log();
  EXPECT_TRUE(absl::StrContains(metrics, "gecd_process_restarts_total{process=\"engine\"} 0\n"))
      << metrics << daemon.log();

  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  const std::optional<int> status = daemon.WaitExit(kGracePeriod + milliseconds(10'000));
  ASSERT_TRUE(status.has_value()) << "still running after the grace period\n" << daemon.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << daemon.log();
  EXPECT_FALSE(std::filesystem::exists(segment));
  for (const auto& [title, pid] : children) {
    EXPECT_NE(kill(pid, 0), 0) << title << " outlived the supervisor";
  }
}

TEST(SupervisorTest, KilledWorkerIsRestartedAlone) {
  Daemon daemon;
  const std::map<std::string, pid_t> before = daemon.WaitForChildren();
  ASSERT_TRUE(before.count("gecd: worker 0")) << daemon.log();
  ASSERT_TRUE(WaitFor([&] { return daemon.Get("/readyz") == 200; })) << daemon.log();
  ASSERT_EQ(kill(before.at("gecd: worker 0"), SIGKILL), 0);

  std::map<std::string, pid_t> after;
  ASSERT_TRUE(WaitFor([&] {
    after = ChildrenByTitle(daemon.pid());
    return after.count("gecd: worker 0") && after.at("gecd: worker 0") != before.at("gecd: worker 0");
  })) << daemon.log();
  EXPECT_EQ(after.at("gecd: worker 1"), before.at("gecd: worker 1")) << daemon.log();
  EXPECT_EQ(after.at("gecd: engine"), before.at("gecd: engine"));
  std::string metrics;
  ASSERT_EQ(daemon.Get("/metrics", &metrics), 200);
  EXPECT_TRUE(absl::StrContains(metrics, "gecd_process_restarts_total{process=\"worker\"} 1\n"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "gecd_process_restarts_total{process=\"engine\"} 0\n"))
      << metrics;
}

TEST(SupervisorTest, ReadyOnlyWithAWarmEngineAndAgainAfterItsRestart) {
  Daemon daemon;
  ASSERT_TRUE(WaitFor([&] { return daemon.Get("/healthz") == 200; })) << daemon.log();
  ASSERT_TRUE(WaitFor([&] { return daemon.Get("/readyz") == 200; })) << daemon.log();
  const std::map<std::string, pid_t> before = daemon.WaitForChildren();
  ASSERT_TRUE(before.count("gecd: engine"));
  ASSERT_EQ(kill(before.at("gecd: engine"), SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] {
    const std::map<std::string, pid_t> now = ChildrenByTitle(daemon.pid());
    return now.count("gecd: engine") && now.at("gecd: engine") != before.at("gecd: engine") &&
           daemon.Get("/readyz") == 200;
  })) << daemon.log();
  std::string metrics;
  ASSERT_EQ(daemon.Get("/metrics", &metrics), 200);
  EXPECT_TRUE(absl::StrContains(metrics, "gecd_process_restarts_total{process=\"engine\"} 1\n"))
      << metrics;
}

TEST(SupervisorTest, RefusesToStartOnABadModelDirectory) {
  // Found before any child starts: the daemon exits at once with the reason, rather than
  // restarting its children forever while /healthz says it is alive.
  for (const char* backend : {"cpu", "echo"}) {
    Daemon daemon({"model.dir=/nonexistent/gecd-model", absl::StrCat("engine.backend=", backend)});
    const std::optional<int> status = daemon.WaitExit(milliseconds(30'000));
    ASSERT_TRUE(status.has_value()) << daemon.log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << daemon.log();
    EXPECT_TRUE(absl::StrContains(daemon.log(), "/nonexistent/gecd-model")) << backend;
    EXPECT_EQ(daemon.log().find("started gecd:"), std::string::npos) << daemon.log();
  }
}

// Issue 12: 4,000,000 MB of KV cache passed validation; the engine then died of std::bad_alloc
// and was restarted forever while /healthz said 200.
TEST(SupervisorTest, RefusesAKvCacheLargerThanTheMachine) {
  Daemon daemon({"engine.kv_cache_mb=4000000"});
  const std::optional<int> status = daemon.WaitExit(milliseconds(30'000));
  ASSERT_TRUE(status.has_value()) << daemon.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << *status << daemon.log();
  EXPECT_TRUE(absl::StrContains(daemon.log(), "engine.kv_cache_mb: 4000000 MB exceeds the memory"))
      << daemon.log();
  EXPECT_EQ(daemon.log().find("started gecd:"), std::string::npos) << daemon.log();
}

// An engine that cannot start although the config and the model directory passed every check
// (here: more KV-cache blocks of this model than the machine holds, which only the model's
// shape tells) stops the daemon with the engine's reason instead of a restart loop.
TEST(SupervisorTest, AnEngineThatCannotStartStopsTheDaemonWithItsReason) {
  testing::RandomModelOptions options;  // blocks of 128 KiB: 2 TiB for 16M of them
  options.hidden_size = 256;
  options.num_layers = 4;
  options.num_heads = 4;
  options.num_kv_heads = 4;
  const std::string model = testing::WriteModelDir(options);
  Daemon daemon(
      {absl::StrCat("model.dir=", model), "engine.backend=cpu", "engine.kv_cache_blocks=16777216"});
  const std::optional<int> status = daemon.WaitExit(milliseconds(60'000));
  ASSERT_TRUE(status.has_value()) << "still running: a restart loop?\n" << daemon.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << *status << daemon.log();
  const std::string log = daemon.log();
  EXPECT_TRUE(absl::StrContains(
      log, "the engine could not start: RESOURCE_EXHAUSTED: engine.kv_cache_blocks: a KV cache"))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "before it was ever ready; not restarting it")) << log;
  size_t engines_started = 0;
  for (size_t at = log.find("started gecd: engine"); at != std::string::npos;
       at = log.find("started gecd: engine", at + 1)) {
    ++engines_started;
  }
  EXPECT_EQ(engines_started, 1u) << log;
}

TEST(SupervisorTest, NotifiesSystemdWhenReadyAndWhenStopping) {
  const std::string path = testing::MakeTempDir() + "/notify.sock";
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval timeout = {60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  auto receive = [fd] {
    char buf[256];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, n) : std::string("(nothing)");
  };

  Daemon daemon({}, {{"NOTIFY_SOCKET", path}});
  EXPECT_EQ(receive(), "READY=1") << daemon.log();
  EXPECT_EQ(daemon.Get("/readyz"), 200);
  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  EXPECT_EQ(receive(), "STOPPING=1") << daemon.log();
  EXPECT_TRUE(daemon.WaitExit(kGracePeriod + milliseconds(10'000)).has_value());
  close(fd);
}

TEST(SupervisorTest, TakenMetricsPortFailsWithoutLeavingTheSegment) {
  // Hold the port the daemon is told to use.
  std::optional<gecd::testing::HeldTcpPort> held(std::in_place);
  Daemon daemon({absl::StrCat("server.metrics_listen=127.0.0.1:", held->port())});
  const std::optional<int> status = daemon.WaitExit(kStartTimeout);
  held.reset();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << *status;
  EXPECT_TRUE(absl::StrContains(daemon.log(), "server.metrics_listen 127.0.0.1:")) << daemon.log();
  EXPECT_TRUE(absl::StrContains(daemon.log(), "already in use")) << daemon.log();
  const std::string prefix = absl::StrCat("gecd-", daemon.pid(), "-");
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    EXPECT_FALSE(absl::StartsWith(entry.path().filename().string(), prefix)) << entry.path();
  }
}

TEST(SupervisorTest, JsonLogLinesNameTheirRole) {
  Daemon daemon({"logging.format=json"});
  daemon.WaitForChildren();
  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  ASSERT_TRUE(daemon.WaitExit(kGracePeriod + milliseconds(10'000)).has_value());
  std::map<std::string, int> lines_by_role;
  for (absl::string_view line : absl::StrSplit(daemon.log(), '\n', absl::SkipEmpty())) {
    // spdlog's lines; libraries that print on their own (gRPC) are not ours to format.
    if (!absl::StartsWith(line, "{\"ts\"")) continue;
    const nlohmann::json j = nlohmann::json::parse(std::string(line), nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    for (const char* key : {"ts", "level", "role", "pid", "msg"}) {
      EXPECT_TRUE(j.contains(key)) << key << " missing: " << line;
    }
    ++lines_by_role[j.value("role", "")];
  }
  EXPECT_GE(lines_by_role["supervisor"], 3) << daemon.log();
}

}  // namespace
}  // namespace gecd::server
