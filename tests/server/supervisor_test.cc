// Runs the real `gecd serve` (supervisor, engine and worker processes) and checks what an
// operator sees: process titles, the shared-memory segment, restarts, /healthz, /readyz,
// /metrics, systemd notifications, and a clean exit on SIGTERM.
#include "server/supervisor.h"

#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/byte_level_tokenizer.h"
#include "testing/random_model.h"
#include "testing/test_paths.h"

namespace gecd::server {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Generous: two shared cores, several daemons' worth of processes, sanitizers maybe.
constexpr milliseconds kStartTimeout(60'000);
constexpr milliseconds kGracePeriod(5'000);

// Polls `done` until it holds or `timeout` passes; the processes under test announce nothing,
// so looking again is the only way to wait for them.
bool WaitFor(const std::function<bool()>& done, milliseconds timeout = kStartTimeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What `ps` shows: the command line up to its first NUL.
std::string Title(pid_t pid) {
  const std::string cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
  return cmdline.substr(0, cmdline.find('\0'));
}

// Live children of `parent`, by title.
std::map<std::string, pid_t> ChildrenByTitle(pid_t parent) {
  std::map<std::string, pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after ')'.
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
    pid_t ppid = 0;
    if (fields.size() < 2 || fields[0] == "Z" || !absl::SimpleAtoi(fields[1], &ppid)) continue;
    if (ppid == parent) children[Title(pid)] = pid;
  }
  return children;
}

// A port free at the time of asking (the daemon binds it right after).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// A model directory for the daemon: a small random model with a byte-level tokenizer.
const std::string& ModelDir() {
  static const std::string dir = [] {
    const std::string d = testing::MakeTempDir() + "/model";
    testing::RandomModelOptions options;
    options.vocab_size = 512;
    EXPECT_TRUE(testing::WriteRandomModel(d, options).ok());
    testing::WriteByteLevelTokenizer(d);
    return d;
  }();
  return dir;
}

// Whether something accepts TCP connections on 127.0.0.1:`port`.
bool Listening(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// One `gecd serve` process, its stderr in a file; killed (with its children) if still running
// at the end of the test.
class Daemon {
 public:
  explicit Daemon(std::vector<std::string> extra_sets = {},
                  std::map<std::string, std::string> env = {})
      : grpc_port_(FreePort()),
        metrics_port_(FreePort()),
        log_path_(testing::MakeTempDir() + "/gecd.log") {
    std::vector<std::string> args = {
        testing::BinaryDir() + "/gecd", "serve",
        "--set", "server.workers=2",
        "--set", absl::StrCat("server.listen=127.0.0.1:", grpc_port_),
        "--set", absl::StrCat("server.metrics_listen=127.0.0.1:", metrics_port_),
        "--set", absl::StrCat("server.grace_period_ms=", kGracePeriod.count()),
        "--set", "engine.backend=echo",
        "--set", "engine.threads=1",
        "--set", absl::StrCat("model.dir=", ModelDir())};
    for (const std::string& s : extra_sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      freopen(log_path_.c_str(), "w", stderr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  // Stops it the way an operator does, so it removes its segment; kills what is left.
  ~Daemon() {
    if (exit_status_) return;
    kill(pid_, SIGTERM);
    if (WaitExit(kGracePeriod + milliseconds(10'000))) return;
    for (const auto& [title, pid] : ChildrenByTitle(pid_)) kill(pid, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  std::string log() const { return ReadFile(log_path_); }

  // The wait status once the process exited within `timeout`.
  std::optional<int> WaitExit(milliseconds timeout) {
    WaitFor([&] {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) exit_status_ = status;
      return exit_status_.has_value();
    }, timeout);
    return exit_status_;
  }

  // HTTP status of GET `path` on the metrics port (0: no answer), body in `body`.
  int Get(const std::string& path, std::string* body = nullptr) const {
    httplib::Client client("127.0.0.1", metrics_port_);
    client.set_connection_timeout(5);
    client.set_read_timeout(10);
    auto res = client.Get(path.c_str());
    if (!res) return 0;
    if (body != nullptr) *body = res->body;
    return res->status;
  }

  // Waits until the engine and `workers` workers run under their titles (a child shows its
  // parent's title between fork and exec); their pids by title.
  std::map<std::string, pid_t> WaitForChildren(int workers = 2) {
    std::vector<std::string> titles = {"gecd: engine"};
    for (int i = 0; i < workers; ++i) titles.push_back(absl::StrCat("gecd: worker ", i));
    std::map<std::string, pid_t> children;
    EXPECT_TRUE(WaitFor([&] {
      children = ChildrenByTitle(pid_);
      return std::all_of(titles.begin(), titles.end(),
                         [&](const std::string& t) { return children.count(t) > 0; });
    })) << log();
    return children;
  }

  // The segment's file, from the supervisor's own mappings.
  std::string SegmentPath() const {
    for (absl::string_view line :
         absl::StrSplit(ReadFile(absl::StrCat("/proc/", pid_, "/maps")), '\n')) {
      const size_t at = line.find("/dev/shm/gecd-");
      if (at != absl::string_view::npos) return std::string(line.substr(at));
    }
    return "";
  }

 private:
  int grpc_port_;
  int metrics_port_;
  std::string log_path_;
  pid_t pid_ = 0;
  std::optional<int> exit_status_;
};

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
  EXPECT_EQ(Title(daemon.pid()), "gecd: supervisor");
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

TEST(SupervisorTest, AliveButNotReadyWhileTheEngineCannotStart) {
  Daemon daemon({"model.dir=/nonexistent/gecd-model", "engine.backend=cpu"});
  // The engine dies at start-up, again and again, with growing pauses.
  std::string metrics;
  ASSERT_TRUE(WaitFor([&] {
    return daemon.Get("/metrics", &metrics) == 200 &&
           !absl::StrContains(metrics, "gecd_process_restarts_total{process=\"engine\"} 0\n");
  })) << metrics << daemon.log();
  EXPECT_EQ(daemon.Get("/healthz"), 200);
  EXPECT_EQ(daemon.Get("/readyz"), 503);
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
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);

  Daemon daemon({absl::StrCat("server.metrics_listen=127.0.0.1:", ntohs(addr.sin_port))});
  const std::optional<int> status = daemon.WaitExit(kStartTimeout);
  close(fd);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << *status;
  EXPECT_TRUE(absl::StrContains(daemon.log(), "cannot listen")) << daemon.log();
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
