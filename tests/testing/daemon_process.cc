#include "testing/daemon_process.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/bound_port.h"
#include "common/child_process.h"
#include "gtest/gtest.h"
#include "testing/byte_level_tokenizer.h"
#include "testing/test_paths.h"

namespace gecd::testing {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

bool WaitFor(const std::function<bool()>& done, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ProcessTitle(pid_t pid) {
  const std::string cmdline = ReadWholeFile(absl::StrCat("/proc/", pid, "/cmdline"));
  return cmdline.substr(0, cmdline.find('\0'));
}

std::map<std::string, pid_t> ChildrenByTitle(pid_t parent) {
  std::map<std::string, pid_t> children;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after ')'.
    const std::string stat = ReadWholeFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 > stat.size()) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
    pid_t ppid = 0;
    if (fields.size() < 2 || fields[0] == "Z" || !absl::SimpleAtoi(fields[1], &ppid)) continue;
    if (ppid == parent) children[ProcessTitle(pid)] = pid;
  }
  return children;
}

int FreeTcpPort() {
  absl::StatusOr<int> port = FreeLoopbackPort();
  EXPECT_TRUE(port.ok()) << port.status();
  return port.value_or(0);
}

HeldTcpPort::HeldTcpPort(bool reuse_port) {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int yes = 1;
  if (reuse_port) setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof(yes));
  sockaddr_in addr = LoopbackAddress(0);
  EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(listen(fd_, 1), 0);
  port_ = BoundPort(fd_);
}

HeldTcpPort::~HeldTcpPort() { close(fd_); }

bool Listening(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = LoopbackAddress(port);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

std::string WriteModelDir(const RandomModelOptions& options) {
  const std::string dir = MakeTempDir() + "/model";
  const absl::Status written = WriteRandomModel(dir, options);
  EXPECT_TRUE(written.ok()) << written;
  WriteByteLevelTokenizer(dir);
  return dir;
}

const std::string& SmallModelDir() {
  static const std::string dir = [] {
    RandomModelOptions options;
    options.vocab_size = 512;
    return WriteModelDir(options);
  }();
  return dir;
}

std::vector<std::string> DefaultDaemonSets() {
  return {"engine.backend=cpu",
          absl::StrCat("model.dir=", SourceDir(), "/models/gecd-gec-small"),
          "model.prompt_template=<s>{text}<sep>",
          "model.copy_bias=2",
          "engine.threads=0",
          "server.slo_p99_ms=1000"};
}

DaemonProcess::DaemonProcess(std::vector<std::string> sets, std::map<std::string, std::string> env)
    : DaemonProcess(Command::kServe, sets, env) {}

std::unique_ptr<DaemonProcess> DaemonProcess::Router(std::vector<std::string> sets) {
  return std::unique_ptr<DaemonProcess>(new DaemonProcess(Command::kRoute, sets, {}));
}

DaemonProcess::DaemonProcess(Command command, const std::vector<std::string>& sets,
                             const std::map<std::string, std::string>& env)
    : grpc_port_(FreeTcpPort()),
      metrics_port_(FreeTcpPort()),
      log_path_(MakeTempDir() + "/gecd.log") {
  ChildProcessOptions child;
  child.executable = BinaryDir() + "/gecd";
  std::vector<std::string>& args = child.argv;
  if (command == Command::kRoute) {
    args = {child.executable, "route",
            "--set",          absl::StrCat("route.listen=127.0.0.1:", grpc_port_),
            "--set",          absl::StrCat("route.metrics_listen=127.0.0.1:", metrics_port_),
            "--set",          absl::StrCat("route.grace_period_ms=", kGracePeriod.count()),
            "--set",          "route.slow_start_s=0"};
  } else {
    args = {child.executable, "serve", "--set", "server.workers=2", "--set",
            absl::StrCat("server.listen=127.0.0.1:", grpc_port_), "--set",
            absl::StrCat("server.metrics_listen=127.0.0.1:", metrics_port_), "--set",
            absl::StrCat("server.grace_period_ms=", kGracePeriod.count()),
            // Shedding by predicted time depends on how fast this (shared) machine is at the
            // moment: an objective of an hour leaves only the calls' own deadlines; tests that
            // want the default set it.
            "--set", "server.slo_p99_ms=3600000", "--set", "engine.backend=echo", "--set",
            "engine.threads=1", "--set", absl::StrCat("model.dir=", SmallModelDir()),
            // Load tests re-send the same sentences, which the sentence cache would answer
            // without the engine; tests of the cache turn it on.
            "--set", "server.sentence_cache_mb=0"};
  }
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  std::vector<std::string_view> replaced;
  std::vector<std::string> added;
  for (const auto& [k, v] : env) {
    replaced.push_back(k);
    added.push_back(absl::StrCat(k, "=", v));
  }
  child.env = ProcessEnvironment(replaced, added);
  child.log_path = log_path_;
  // In the test's process group, as a test's Ctrl-C should stop its daemons too.
  child.own_process_group = false;
  absl::StatusOr<pid_t> pid = SpawnProcess(child);
  EXPECT_TRUE(pid.ok()) << pid.status();
  pid_ = pid.value_or(0);
}

DaemonProcess::~DaemonProcess() {
  if (exit_status_ || pid_ <= 0) return;
  kill(pid_, SIGTERM);
  if (WaitExit(kGracePeriod + milliseconds(10'000))) return;
  for (const auto& [title, pid] : ChildrenByTitle(pid_)) kill(pid, SIGKILL);
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

std::string DaemonProcess::grpc_target() const { return absl::StrCat("127.0.0.1:", grpc_port_); }

std::optional<int> DaemonProcess::WaitExit(milliseconds timeout) {
  if (!exit_status_ && pid_ > 0) exit_status_ = WaitChildExit(pid_, timeout);
  return exit_status_;
}

int DaemonProcess::Get(const std::string& path, std::string* body) const {
  return HttpGet(metrics_port_, path, body);
}

std::optional<double> DaemonProcess::Metric(const std::string& series) const {
  std::string metrics;
  if (Get("/metrics", &metrics) != 200) return std::nullopt;
  return MetricValue(metrics, series);
}

bool DaemonProcess::WaitReady(milliseconds timeout) {
  bool ready = false;
  WaitFor(
      [&] {
        ready = Get("/readyz") == 200 && Listening(grpc_port_);
        return ready || WaitExit(milliseconds(0)).has_value();  // no point waiting for the dead
      },
      timeout);
  if (!ready && exit_status_) {
    ADD_FAILURE() << "gecd exited with wait status " << *exit_status_ << " before ready";
  }
  return ready;
}

std::map<std::string, pid_t> DaemonProcess::WaitForChildren(int workers) {
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

std::string DaemonProcess::SegmentPath() const {
  for (absl::string_view line :
       absl::StrSplit(ReadWholeFile(absl::StrCat("/proc/", pid_, "/maps")), '\n')) {
    const size_t at = line.find("/dev/shm/gecd-");
    if (at != absl::string_view::npos) return std::string(line.substr(at));
  }
  return "";
}

}  // namespace gecd::testing
