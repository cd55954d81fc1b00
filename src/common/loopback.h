#ifndef GECD_COMMON_LOOPBACK_H_
#define GECD_COMMON_LOOPBACK_H_

#include <netinet/in.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// What a process on the same machine uses to run and watch a gecd daemon: a free port to give
// it, the one fork-and-exec of a child process (the daemons `gecd tune` and the tests start,
// and the supervisor's engine and workers), a plain HTTP/1.1 GET of its /readyz or /metrics,
// and one sample of that page. Blocking sockets and plain system calls only, so tests (with or
// without the daemon built), `gecd tune` and the supervisor share them. Thread-safe: no state.
namespace gecd {

// 127.0.0.1:`port`, for bind and connect.
sockaddr_in LoopbackAddress(int port);

// A 127.0.0.1 TCP port free at the time of asking (whoever asked binds it right after).
absl::StatusOr<int> FreeLoopbackPort();

// One child process to start. Everything is prepared before the fork, so the child makes only
// async-signal-safe calls before exec: the parent may be multithreaded.
struct ChildProcessOptions {
  std::string executable;         // the file to exec
  std::vector<std::string> argv;  // argv[0] included: the title `ps` shows
  // The child's whole environment, KEY=VALUE (ProcessEnvironment builds one from ours).
  std::vector<std::string> env;
  std::string log_path;  // "": stdout and stderr inherited; else both go to this file, truncated
  bool own_process_group = true;     // so that a terminal's Ctrl-C reaches the parent alone
  int parent_death_signal = 0;       // sent to the child when the parent dies; 0: none
  bool close_inherited_fds = false;  // closes every descriptor above stderr before exec
  bool clear_signal_mask = false;    // instead of inheriting the calling thread's blocked set
};

// Forks and execs `options`; the child's pid. PermissionDenied when the log cannot be written,
// Internal when fork fails. A child whose exec fails writes why to its stderr and exits 127.
absl::StatusOr<pid_t> SpawnProcess(const ChildProcessOptions& options);

// This process's environment without the variables named in `drop`, then `set` (KEY=VALUE).
std::vector<std::string> ProcessEnvironment(const std::vector<std::string_view>& drop,
                                            const std::vector<std::string>& set);

// The wait status of child `pid` once it exits within `timeout` (polled every 20 ms); nullopt
// while it still runs.
std::optional<int> WaitChildExit(pid_t pid, std::chrono::milliseconds timeout);

// How a wait status reads in a message: "exited with code 2", "was killed by signal 9".
std::string DescribeWaitStatus(int wait_status);

// GET http://127.0.0.1:`port``path` with a 10 s timeout per socket operation: the status
// (0: no answer), the body in `body` (the response is read until the server closes).
int HttpGet(int port, const std::string& path, std::string* body = nullptr);

// The value of the sample `series` (e.g. `gecd_requests_total{code="OK"}` or
// `gecd_request_concurrency`) in Prometheus text `metrics`; nullopt when absent.
std::optional<double> MetricValue(const std::string& metrics, const std::string& series);

}  // namespace gecd

#endif  // GECD_COMMON_LOOPBACK_H_
