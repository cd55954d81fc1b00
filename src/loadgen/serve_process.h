#ifndef GECD_LOADGEN_SERVE_PROCESS_H_
#define GECD_LOADGEN_SERVE_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gecd::loadgen {

// How to start one `gecd serve`.
struct ServeOptions {
  std::string binary;             // the gecd executable ("/proc/self/exe" from within gecd)
  std::string config_path;        // "" for the built-in defaults
  std::vector<std::string> sets;  // KEY=VALUE, applied after the config file
  std::string log_path;           // its stderr and stdout
  double ready_timeout_s = 120;
  double stop_timeout_s = 15;  // SIGTERM, then SIGKILL after this long
};

// One `gecd serve` child process on free 127.0.0.1 ports (server.listen and
// server.metrics_listen are set after `sets`), for tools that measure daemons they start
// themselves, started with SpawnProcess (common/child_process.h, the launcher the supervisor and
// the tests' DaemonProcess use too). It runs in its own process group, so a terminal's Ctrl-C
// reaches the tool alone, and gets SIGTERM if the tool dies. Destruction stops it as an operator
// does (SIGTERM: it drains and removes its segment), with SIGKILL after stop_timeout_s.
class ServeProcess {
 public:
  // Returns once /readyz answers 200. FailedPrecondition when it exits first, with the error it
  // logged last (which names the config key or file at fault); DeadlineExceeded when it is not
  // ready within ready_timeout_s.
  static absl::StatusOr<std::unique_ptr<ServeProcess>> Start(const ServeOptions& options);
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  std::string grpc_target() const;  // 127.0.0.1:PORT
  int metrics_port() const { return metrics_port_; }
  // `series` from its /metrics now; nullopt when the page or the series is missing.
  std::optional<double> Metric(const std::string& series) const;

 private:
  ServeProcess(const ServeOptions& options, int grpc_port, int metrics_port)
      : options_(options), grpc_port_(grpc_port), metrics_port_(metrics_port) {}
  // The last error (or critical) line of its log, without the time and level prefix.
  std::string LastLoggedError() const;

  const ServeOptions options_;
  const int grpc_port_;
  const int metrics_port_;
  pid_t pid_ = 0;
  bool exited_ = false;
};

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_SERVE_PROCESS_H_
