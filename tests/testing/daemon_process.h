#ifndef GECD_TESTS_TESTING_DAEMON_PROCESS_H_
#define GECD_TESTS_TESTING_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/loopback.h"
#include "testing/random_model.h"

// Runs the real `gecd serve` (supervisor, engine, workers) for integration tests, and the
// /proc and HTTP helpers those tests need to watch it. Uses only sockets and /proc, so it links
// into gecd_testing with or without the daemon built.
namespace gecd::testing {

// Generous: two shared cores, several daemons' worth of processes, sanitizers maybe.
inline constexpr std::chrono::milliseconds kDaemonStartTimeout(60'000);

// Polls `done` every 20 ms until it holds (true) or `timeout` passes (false).
bool WaitFor(const std::function<bool()>& done,
             std::chrono::milliseconds timeout = kDaemonStartTimeout);

// The whole file, or "" when it cannot be read.
std::string ReadWholeFile(const std::string& path);

// What `ps` shows for `pid`: its command line up to the first NUL.
std::string ProcessTitle(pid_t pid);

// Live (not zombie) children of `parent`, by title.
std::map<std::string, pid_t> ChildrenByTitle(pid_t parent);

// A 127.0.0.1 TCP port free at the time of asking (the daemon binds it right after); a test
// failure when none can be had.
int FreeTcpPort();

// A loopback TCP port held (bound and listening) until destruction, optionally with
// SO_REUSEPORT as gecd's workers bind theirs: for tests of what a taken port does.
class HeldTcpPort {
 public:
  explicit HeldTcpPort(bool reuse_port = false);
  ~HeldTcpPort();
  HeldTcpPort(const HeldTcpPort&) = delete;
  HeldTcpPort& operator=(const HeldTcpPort&) = delete;
  int port() const { return port_; }
  int fd() const { return fd_; }  // for a test that accepts on it itself

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Whether something accepts TCP connections on 127.0.0.1:`port`.
bool Listening(int port);

// HTTP/1.1 GET of a loopback port and a sample of a /metrics page (common/loopback.h).
using ::gecd::HttpGet;
using ::gecd::MetricValue;

// A new model directory (in a MakeTempDir()) with a random model of `options` and a byte-level
// tokenizer.json (one token per byte).
std::string WriteModelDir(const RandomModelOptions& options);

// The default model for daemon tests: a small random model, vocab 512, written once.
const std::string& SmallModelDir();

// The --set lines of the default daemon of configs/gecd.yaml, as far as tests can have it: the
// default model with its prompt template and copy bias, every core for the engine, the default
// latency objective (DaemonProcess otherwise sets an hour). Not the spelling stage: the
// dictionary is a system package.
std::vector<std::string> DefaultDaemonSets();

// One `gecd serve` process, its stdout and stderr in a file, started with SpawnProcess
// (common/child_process.h, the launcher `gecd tune`'s ServeProcess and the supervisor use too) in
// the test's process group. The base command line runs 2 workers on the
// `echo` backend with SmallModelDir() on free 127.0.0.1 ports, a 5 s grace period and no
// sentence cache (load tests re-send the same sentences); `sets`
// (KEY=VALUE, applied after the base ones, so they override them) change that. The destructor
// stops it with SIGTERM, as an operator does (so it removes its segment), and kills whatever
// is left with SIGKILL.
class DaemonProcess {
 public:
  static constexpr std::chrono::milliseconds kGracePeriod{5'000};

  explicit DaemonProcess(std::vector<std::string> sets = {},
                         std::map<std::string, std::string> env = {});
  // `gecd route` instead, on free 127.0.0.1 ports (route.listen, route.metrics_listen), with
  // a 5 s grace period and no slow start, then `sets`.
  static std::unique_ptr<DaemonProcess> Router(std::vector<std::string> sets);
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  std::string grpc_target() const;
  std::string log() const { return ReadWholeFile(log_path_); }

  // The wait status once the process exited within `timeout`.
  std::optional<int> WaitExit(std::chrono::milliseconds timeout);

  // HTTP status of GET `path` on the metrics port (0: no answer), body in `body`.
  int Get(const std::string& path, std::string* body = nullptr) const;

  // `series` from /metrics, nullopt when the page or the series is missing.
  std::optional<double> Metric(const std::string& series) const;

  // Polls until /readyz answers 200 and the gRPC port accepts connections; false (and a test
  // failure naming the exit status) at once if the daemon exits first.
  bool WaitReady(std::chrono::milliseconds timeout = kDaemonStartTimeout);

  // Waits until the engine and `workers` workers run under their titles (a child shows its
  // parent's title between fork and exec); their pids by title.
  std::map<std::string, pid_t> WaitForChildren(int workers = 2);

  // The segment's file, from the supervisor's own mappings ("" when none).
  std::string SegmentPath() const;

 private:
  enum class Command { kServe, kRoute };
  DaemonProcess(Command command, const std::vector<std::string>& sets,
                const std::map<std::string, std::string>& env);

  int grpc_port_;
  int metrics_port_;
  std::string log_path_;
  pid_t pid_ = 0;
  std::optional<int> exit_status_;
};

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_DAEMON_PROCESS_H_
