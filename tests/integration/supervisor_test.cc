// Runs the real `gecd serve` (supervisor, engine and worker processes) and checks what an
// operator sees: process titles, the shared-memory segment, restarts, /healthz, /readyz,
// /metrics, systemd notifications, and a clean exit on SIGTERM.
#include "supervisor/supervisor.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/scoped_temp_dir.h"
#include "testing/test_paths.h"
#include "tls/test_certificates.h"

namespace gecd::supervisor {
namespace {

using std::chrono::milliseconds;

using testing::ChildrenByTitle;
using testing::Listening;
using testing::WaitFor;
using Daemon = testing::DaemonProcess;

constexpr milliseconds kStartTimeout = testing::kDaemonStartTimeout;
constexpr milliseconds kGracePeriod = Daemon::kGracePeriod;

// The nice value of process `pid` (its main thread's), or -100 when it cannot be read.
int NiceOf(pid_t pid) {
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, pid);
  return errno == 0 ? nice : -100;
}

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
  // The engine at the supervisor's priority, the workers server.worker_nice (5) below it.
  const int supervisor_nice = NiceOf(daemon.pid());
  ASSERT_GE(supervisor_nice, -20);
  EXPECT_EQ(NiceOf(children.at("gecd: engine")), supervisor_nice);
  EXPECT_EQ(NiceOf(children.at("gecd: worker 0")), std::min(supervisor_nice + 5, 19));
  EXPECT_EQ(NiceOf(children.at("gecd: worker 1")), std::min(supervisor_nice + 5, 19));

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

// The engine's OpenMP threads spin a bounded while at a barrier (GOMP_SPINCOUNT) unless the
// operator's environment chose how they wait; the engine's start-up line says which. (Its
// /proc/PID/environ cannot tell: the process title takes that memory.)
TEST(SupervisorTest, TheEngineSpinsABoundedWhileUnlessTheOperatorChose) {
  struct Case {
    std::map<std::string, std::string> env;
    std::string line;
  };
  const std::vector<Case> cases = {
      {{{"OMP_WAIT_POLICY", ""}, {"GOMP_SPINCOUNT", ""}}, "wait as GOMP_SPINCOUNT=10000"},
      {{{"OMP_WAIT_POLICY", "passive"}}, "wait as OMP_WAIT_POLICY=passive"},
      {{{"GOMP_SPINCOUNT", "200"}}, "wait as GOMP_SPINCOUNT=200"}};
  for (const Case& c : cases) {
    Daemon daemon({"engine.backend=cpu"}, c.env);
    ASSERT_TRUE(WaitFor([&] { return absl::StrContains(daemon.log(), "compute threads"); }))
        << daemon.log();
    const std::string log = daemon.log();
    EXPECT_TRUE(absl::StrContains(log, c.line)) << c.line << "\n" << log;
    if (c.line != cases[0].line) EXPECT_FALSE(absl::StrContains(log, cases[0].line)) << log;
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
    return after.count("gecd: worker 0") &&
           after.at("gecd: worker 0") != before.at("gecd: worker 0");
  })) << daemon.log();
  EXPECT_EQ(after.at("gecd: worker 1"), before.at("gecd: worker 1")) << daemon.log();
  EXPECT_EQ(after.at("gecd: engine"), before.at("gecd: engine"));
  EXPECT_EQ(NiceOf(after.at("gecd: worker 0")), NiceOf(after.at("gecd: worker 1")));
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

// systemd's notification socket, played by the test: a bound unix datagram socket whose path
// goes to the daemon as NOTIFY_SOCKET. Keeps every assignment received, in order (one datagram
// may carry several, one a line).
class NotifySocket {
 public:
  NotifySocket() : path_(testing::MakeTempDir() + "/notify.sock") {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path_;
  }
  ~NotifySocket() { close(fd_); }

  const std::string& path() const { return path_; }
  const std::vector<std::string>& received() const { return received_; }

  // Receives until an assignment starting with `prefix` arrives (true) or `timeout` passes.
  bool WaitFor(absl::string_view prefix, milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left <= milliseconds(0)) return false;
      const size_t before = received_.size();
      if (!ReceiveOne(left)) continue;
      for (size_t i = before; i < received_.size(); ++i) {
        if (absl::StartsWith(received_[i], prefix)) return true;
      }
    }
  }

  // Everything that arrives within `duration`.
  std::vector<std::string> ReceiveFor(milliseconds duration) {
    const size_t before = received_.size();
    const auto deadline = std::chrono::steady_clock::now() + duration;
    for (auto now = std::chrono::steady_clock::now(); now < deadline;
         now = std::chrono::steady_clock::now()) {
      ReceiveOne(std::chrono::duration_cast<milliseconds>(deadline - now));
    }
    return {received_.begin() + before, received_.end()};
  }

  // Where the first assignment equal to `what` is at or after `from`; npos when none.
  size_t Find(absl::string_view what, size_t from = 0) const {
    for (size_t i = from; i < received_.size(); ++i) {
      if (received_[i] == what) return i;
    }
    return std::string::npos;
  }

 private:
  bool ReceiveOne(milliseconds timeout) {
    pollfd p = {fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, timeout.count()))) != 1) return false;
    char buf[512];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    for (absl::string_view line : absl::StrSplit(absl::string_view(buf, n), '\n')) {
      received_.emplace_back(line);
    }
    return true;
  }

  std::string path_;
  int fd_ = -1;
  std::vector<std::string> received_;
};

std::string Joined(const std::vector<std::string>& lines) { return absl::StrJoin(lines, " | "); }

TEST(SupervisorTest, NotifiesSystemdReadyStatusWatchdogAndStopping) {
  NotifySocket notify;
  Daemon daemon({}, {{"NOTIFY_SOCKET", notify.path()}, {"WATCHDOG_USEC", "300000"}});
  ASSERT_TRUE(notify.WaitFor("READY=1", kStartTimeout))
      << Joined(notify.received()) << daemon.log();
  EXPECT_EQ(daemon.Get("/readyz"), 200);
  // Pinged every 150 ms while idle: no work queued, so no step is owed.
  notify.ReceiveFor(milliseconds(1'200));
  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  ASSERT_TRUE(notify.WaitFor("STOPPING=1", milliseconds(10'000))) << Joined(notify.received());
  EXPECT_TRUE(daemon.WaitExit(kGracePeriod + milliseconds(10'000)).has_value());
  notify.ReceiveFor(milliseconds(100));

  const std::string got = Joined(notify.received());
  const size_t ready = notify.Find("READY=1");
  const size_t serving = notify.Find("STATUS=serving: 2 workers, engine ready");
  const size_t ping = notify.Find("WATCHDOG=1", serving == std::string::npos ? 0 : serving);
  const size_t stopping = notify.Find("STOPPING=1");
  ASSERT_NE(ready, std::string::npos) << got;
  ASSERT_NE(serving, std::string::npos) << got;
  ASSERT_NE(ping, std::string::npos) << got;
  ASSERT_NE(stopping, std::string::npos) << got;
  EXPECT_LT(ready, serving) << got;
  EXPECT_LT(serving, ping) << got;
  EXPECT_LT(ping, stopping) << got;
  EXPECT_EQ(notify.Find("STATUS=draining", stopping), stopping + 1) << got;
  EXPECT_EQ(notify.Find("READY=1", ready + 1), std::string::npos) << got;  // once only
  int pings = 0;
  for (size_t i = ready; i < stopping; ++i) pings += notify.received()[i] == "WATCHDOG=1";
  EXPECT_GE(pings, 5) << got;  // 1.2 s at one per 150 ms, give or take the poll and two cores
}

TEST(SupervisorTest, WedgedEngineWithWorkQueuedGetsNoWatchdogPings) {
  NotifySocket notify;
  Daemon daemon({"server.workers=1"},
                {{"NOTIFY_SOCKET", notify.path()}, {"WATCHDOG_USEC", "400000"}});
  ASSERT_TRUE(notify.WaitFor("READY=1", kStartTimeout))
      << Joined(notify.received()) << daemon.log();
  ASSERT_TRUE(notify.WaitFor("WATCHDOG=1", milliseconds(10'000))) << Joined(notify.received());
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  const std::map<std::string, pid_t> children = daemon.WaitForChildren(1);
  ASSERT_TRUE(children.count("gecd: engine")) << daemon.log();
  const pid_t engine = children.at("gecd: engine");

  // Stopped, the engine stands for one stuck in a step: alive, and never finishing one.
  ASSERT_EQ(kill(engine, SIGSTOP), 0);
  absl::Cleanup resume = [engine] { kill(engine, SIGCONT); };
  auto channel = grpc::CreateChannel(daemon.grpc_target(), grpc::InsecureChannelCredentials());
  auto stub = gecd::v1::GrammarCorrection::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  gecd::v1::CorrectRequest request;
  request.set_text("She go to school yesterday.");
  gecd::v1::CorrectResponse response;
  std::promise<grpc::Status> done;
  stub->async()->Correct(&context, &request, &response,
                         [&done](grpc::Status status) { done.set_value(std::move(status)); });

  // Pings stop within half the interval of the request reaching the ring...
  ASSERT_TRUE(notify.WaitFor("STATUS=engine stalled", milliseconds(10'000)))
      << Joined(notify.received()) << daemon.log();
  // ...and none comes for four whole intervals: systemd would have restarted the daemon.
  const std::vector<std::string> wedged = notify.ReceiveFor(milliseconds(1'600));
  EXPECT_EQ(std::count(wedged.begin(), wedged.end(), "WATCHDOG=1"), 0) << Joined(wedged);
  EXPECT_TRUE(absl::StrContains(daemon.log(), "withholding systemd watchdog pings"))
      << daemon.log();

  std::move(resume).Invoke();
  ASSERT_TRUE(notify.WaitFor("STATUS=serving: 1 worker, engine ready", milliseconds(5'000)))
      << Joined(notify.received());
  ASSERT_TRUE(notify.WaitFor("WATCHDOG=1", milliseconds(5'000))) << Joined(notify.received());
  std::future<grpc::Status> status = done.get_future();
  ASSERT_EQ(status.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  const grpc::Status answer = status.get();
  EXPECT_TRUE(answer.ok()) << answer.error_message();
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

// Bad certificate or tokens files stop `gecd serve` before any child starts: exit 2, and a line
// naming the key, the file and the reason.
TEST(SupervisorTest, BadCertificateOrTokensFileIsExit2NamingIt) {
  gecd::testing::ScopedTempDir dir;
  const std::string cert = dir.path() + "/tls.crt";
  const std::string key = dir.path() + "/tls.key";
  testing::WriteTestFile(cert, "not a certificate\n");
  testing::WriteTestFile(key, "nor a key\n");
  {
    Daemon daemon({"tls.cert_file=" + cert, "tls.key_file=" + key});
    const std::optional<int> status = daemon.WaitExit(kStartTimeout);
    ASSERT_TRUE(status.has_value()) << daemon.log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << *status;
    EXPECT_TRUE(absl::StrContains(daemon.log(), "tls.cert_file " + cert + ": no PEM certificate"))
        << daemon.log();
  }
  {
    const std::string metrics_cert = dir.path() + "/metrics.crt";
    const std::string metrics_key = dir.path() + "/metrics.key";
    const testing::PemPair expired = testing::TestCa("test CA").Issue("gecd", -7200, -3600);
    testing::WritePemPair(expired, metrics_cert, metrics_key);
    Daemon daemon({"metrics_tls.cert_file=" + metrics_cert, "metrics_tls.key_file=" + metrics_key});
    const std::optional<int> status = daemon.WaitExit(kStartTimeout);
    ASSERT_TRUE(status.has_value()) << daemon.log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << *status;
    EXPECT_TRUE(
        absl::StrContains(daemon.log(), "metrics_tls.cert_file " + metrics_cert + ": expired"))
        << daemon.log();
  }
  const std::string tokens = dir.path() + "/tokens";
  testing::WriteTestFile(tokens, "# clients\nfrontend\n");
  Daemon daemon({"auth.tokens_file=" + tokens});
  const std::optional<int> status = daemon.WaitExit(kStartTimeout);
  ASSERT_TRUE(status.has_value()) << daemon.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << *status;
  EXPECT_TRUE(absl::StrContains(daemon.log(), tokens + ":2: expected 'name sha256-hex'"))
      << daemon.log();
}

// The real daemon over TLS with bearer tokens: a plaintext client gets nothing, a TLS client
// without a token UNAUTHENTICATED, one with the token its correction.
TEST(SupervisorTest, ServesOverTlsWithBearerTokens) {
  gecd::testing::ScopedTempDir dir;
  const testing::TestCa ca("test CA");
  const testing::PemPair pair = ca.Issue("gecd");
  const std::string cert = dir.path() + "/tls.crt";
  const std::string key = dir.path() + "/tls.key";
  const std::string tokens = dir.path() + "/tokens";
  testing::WritePemPair(pair, cert, key);
  // SHA-256 of "abc" (FIPS 180-2's test vector).
  testing::WriteTestFile(
      tokens, "frontend ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n");
  Daemon daemon({"server.workers=1", "tls.cert_file=" + cert, "tls.key_file=" + key,
                 "auth.tokens_file=" + tokens});
  ASSERT_TRUE(WaitFor([&] { return daemon.Get("/readyz") == 200; })) << daemon.log();
  const auto correct = [&](std::shared_ptr<grpc::ChannelCredentials> credentials,
                           const std::string& authorization) {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    auto stub = gecd::v1::GrammarCorrection::NewStub(
        grpc::CreateCustomChannel(daemon.grpc_target(), credentials, args));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    gecd::v1::CorrectRequest request;
    request.set_text("she go home");
    gecd::v1::CorrectResponse response;
    return stub->Correct(&context, request, &response).error_code();
  };
  grpc::SslCredentialsOptions trust;
  trust.pem_root_certs = ca.certificate();
  EXPECT_EQ(correct(grpc::InsecureChannelCredentials(), "Bearer abc"),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(correct(grpc::SslCredentials(trust), ""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(correct(grpc::SslCredentials(trust), "Bearer abc"), grpc::StatusCode::OK)
      << daemon.log();
  std::string metrics;
  ASSERT_EQ(daemon.Get("/metrics", &metrics), 200);
  EXPECT_TRUE(
      absl::StrContains(metrics, "gecd_client_requests_total{client=\"frontend\",code=\"OK\"} 1\n"))
      << metrics;
}

// A raw TCP connection to 127.0.0.1:port; -1 if it cannot connect.
int ConnectRaw(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
    return fd;
  }
  if (fd >= 0) close(fd);
  return -1;
}

// True once the peer has closed `fd` (EOF or a reset) within `timeout`.
bool ClosedByPeer(int fd, milliseconds timeout) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
  char byte;
  return recv(fd, &byte, 1, 0) <= 0;
}

// The sets that serve TLS with a certificate for "gecd" that `ca` issued, written under `dir`.
std::vector<std::string> TlsSets(const testing::TestCa& ca, const std::string& dir) {
  const std::string cert = dir + "/tls.crt";
  const std::string key = dir + "/tls.key";
  testing::WritePemPair(ca.Issue("gecd"), cert, key);
  return {"tls.cert_file=" + cert, "tls.key_file=" + key};
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One Correct call over TLS, trusting `ca`.
grpc::Status CorrectOverTls(const Daemon& daemon, const testing::TestCa& ca) {
  grpc::SslCredentialsOptions trust;
  trust.pem_root_certs = ca.certificate();
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  auto stub = gecd::v1::GrammarCorrection::NewStub(
      grpc::CreateCustomChannel(daemon.grpc_target(), grpc::SslCredentials(trust), args));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  gecd::v1::CorrectRequest request;
  request.set_text("she go home");
  gecd::v1::CorrectResponse response;
  return stub->Correct(&context, request, &response);
}

// A flood of connections that never finish their TLS handshake (nothing sent, or a ClientHello
// cut short) holds each for server.tls_handshake_timeout_ms only, and a client that does finish
// is served meanwhile.
TEST(SupervisorTest, ConnectionsThatNeverFinishTheirHandshakeAreClosedAtTheTimeout) {
  gecd::testing::ScopedTempDir dir;
  const testing::TestCa ca("test CA");
  const std::vector<std::string> tls = TlsSets(ca, dir.path());
  Daemon daemon(Concat(tls, {"server.workers=1", "server.tls_handshake_timeout_ms=500"}));
  ASSERT_TRUE(WaitFor([&] { return daemon.Get("/readyz") == 200; })) << daemon.log();
  std::vector<int> stalled;
  absl::Cleanup close_all = [&] {
    for (int fd : stalled) close(fd);
  };
  // A TLS record header announcing a 512-byte handshake message, and nothing after it.
  const unsigned char partial_hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};
  for (int i = 0; i < 200; ++i) {
    const int fd = ConnectRaw(daemon.grpc_port());
    ASSERT_GE(fd, 0) << "connection " << i;
    if (i % 2 == 1) {
      ASSERT_EQ(send(fd, partial_hello, sizeof(partial_hello), 0),
                static_cast<ssize_t>(sizeof(partial_hello)));
    }
    stalled.push_back(fd);
  }
  EXPECT_TRUE(CorrectOverTls(daemon, ca).ok()) << daemon.log();
  // gRPC checks its handshake deadlines on a timer; 0.5 s after, with room for a loaded box.
  for (size_t i = 0; i < stalled.size(); ++i) {
    EXPECT_TRUE(ClosedByPeer(stalled[i], milliseconds(5'000))) << "connection " << i;
  }
}

// Past server.max_tls_handshakes connections within the handshake timeout, a new connection is
// closed at once, so a flood of slow handshakes holds that many per worker at most; once the
// stalled ones are cut off at the timeout, a TLS client is served again.
TEST(SupervisorTest, ConnectionsPastTheHandshakeCapAreClosedAtOnce) {
  gecd::testing::ScopedTempDir dir;
  const testing::TestCa ca("test CA");
  const std::vector<std::string> tls = TlsSets(ca, dir.path());
  constexpr int kCap = 20;
  constexpr milliseconds kTimeout(3'000);
  Daemon daemon(Concat(tls, {"server.workers=1",
                             "server.tls_handshake_timeout_ms=" + std::to_string(kTimeout.count()),
                             "server.max_tls_handshakes=" + std::to_string(kCap)}));
  ASSERT_TRUE(WaitFor([&] { return daemon.Get("/readyz") == 200; })) << daemon.log();
  std::vector<int> stalled;
  absl::Cleanup close_all = [&] {
    for (int fd : stalled) close(fd);
  };
  for (int i = 0; i < kCap; ++i) {
    const int fd = ConnectRaw(daemon.grpc_port());
    ASSERT_GE(fd, 0) << "connection " << i;
    stalled.push_back(fd);
  }
  const auto stalled_at = std::chrono::steady_clock::now();
  const int past_cap = ConnectRaw(daemon.grpc_port());
  ASSERT_GE(past_cap, 0);
  EXPECT_TRUE(ClosedByPeer(past_cap, kTimeout / 3)) << "not closed at once";
  close(past_cap);
  EXPECT_LT(std::chrono::steady_clock::now() - stalled_at, kTimeout);
  for (size_t i = 0; i < stalled.size(); ++i) {
    EXPECT_TRUE(ClosedByPeer(stalled[i], kTimeout + milliseconds(5'000))) << "connection " << i;
  }
  EXPECT_TRUE(CorrectOverTls(daemon, ca).ok()) << daemon.log();
  EXPECT_TRUE(absl::StrContains(daemon.log(), "server.max_tls_handshakes")) << daemon.log();
  EXPECT_EQ(daemon.Metric("gecd_tls_connections_refused_total"), 1.0);
}

// The metrics port over HTTPS (metrics_tls), as a kubelet with `scheme: HTTPS` and Prometheus
// with `scheme: https` reach it: /readyz answers once the daemon is ready, plain HTTP does not.
TEST(SupervisorTest, ServesReadyzOverHttpsWithMetricsTls) {
  gecd::testing::ScopedTempDir dir;
  const testing::TestCa ca("metrics CA");
  const testing::PemPair pair = ca.Issue("gecd");
  const std::string cert = dir.path() + "/metrics.crt";
  const std::string key = dir.path() + "/metrics.key";
  testing::WritePemPair(pair, cert, key);
  Daemon daemon(
      {"server.workers=1", "metrics_tls.cert_file=" + cert, "metrics_tls.key_file=" + key});
  std::string body;
  ASSERT_TRUE(WaitFor([&] {
    return testing::HttpsGet(daemon.metrics_port(), "/readyz", ca.certificate(), nullptr, &body) ==
           200;
  })) << daemon.log();
  EXPECT_EQ(body, "ready\n");
  EXPECT_EQ(testing::HttpsGet(daemon.metrics_port(), "/metrics", ca.certificate(), nullptr, &body),
            200);
  EXPECT_TRUE(absl::StrContains(body, "gecd_requests_total")) << body;
  EXPECT_EQ(daemon.Get("/readyz"), 0);  // plain HTTP
  EXPECT_TRUE(absl::StrContains(daemon.log(),
                                "(port " + std::to_string(daemon.metrics_port()) + ", HTTPS)"))
      << daemon.log();
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
}  // namespace gecd::supervisor
