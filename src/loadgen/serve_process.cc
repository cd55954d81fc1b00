#include "loadgen/serve_process.h"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/child_process.h"
#include "common/loopback.h"
#include "common/status_macros.h"

namespace gecd::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

absl::StatusOr<std::unique_ptr<ServeProcess>> ServeProcess::Start(const ServeOptions& options) {
  ASSIGN_OR_RETURN(const int grpc_port, FreeLoopbackPort());
  ASSIGN_OR_RETURN(const int metrics_port, FreeLoopbackPort());
  std::unique_ptr<ServeProcess> p(new ServeProcess(options, grpc_port, metrics_port));
  ChildProcessOptions child;
  child.executable = options.binary;
  child.argv = {"gecd", "serve"};
  if (!options.config_path.empty()) {
    child.argv.push_back("--config");
    child.argv.push_back(options.config_path);
  }
  // A trial re-sends the same sentences, which the sentence cache would answer without the
  // engine: the engine's rate is what is measured.
  std::vector<std::string> sets = {"server.sentence_cache_mb=0"};
  sets.insert(sets.end(), options.sets.begin(), options.sets.end());
  sets.push_back(absl::StrCat("server.listen=127.0.0.1:", grpc_port));
  sets.push_back(absl::StrCat("server.metrics_listen=127.0.0.1:", metrics_port));
  // That port is the trial's own, on loopback, and read here in plain HTTP: no metrics_tls,
  // whatever the config says.
  for (const char* key : {"metrics_tls.cert_file=", "metrics_tls.key_file=",
                          "metrics_tls.client_ca_file=", "metrics_tls.require_client_cert=false"}) {
    sets.push_back(key);
  }
  for (const std::string& s : sets) {
    child.argv.push_back("--set");
    child.argv.push_back(s);
  }
  child.env = ProcessEnvironment({}, {});
  child.log_path = options.log_path;
  child.own_process_group = true;
  child.parent_death_signal = SIGTERM;
  ASSIGN_OR_RETURN(p->pid_, SpawnProcess(child));
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options.ready_timeout_s));
  while (HttpGet(metrics_port, "/readyz") != 200) {
    if (const std::optional<int> status = WaitChildExit(p->pid_, std::chrono::milliseconds(0))) {
      p->exited_ = true;
      return absl::FailedPreconditionError(
          absl::StrCat("gecd serve ", DescribeWaitStatus(*status),
                       " before it was ready: ", p->LastLoggedError()));
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrFormat("gecd serve was not ready within %.0f s (log: %s)",
                          options.ready_timeout_s, options.log_path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return p;
}

ServeProcess::~ServeProcess() {
  if (pid_ <= 0 || exited_) return;
  kill(pid_, SIGTERM);
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(options_.stop_timeout_s));
  if (!WaitChildExit(pid_, timeout).has_value()) {
    kill(pid_, SIGKILL);  // its children get SIGKILL from the kernel (PR_SET_PDEATHSIG)
    waitpid(pid_, nullptr, 0);
  }
}

std::string ServeProcess::grpc_target() const { return absl::StrCat("127.0.0.1:", grpc_port_); }

std::optional<double> ServeProcess::Metric(const std::string& series) const {
  std::string metrics;
  if (HttpGet(metrics_port_, "/metrics", &metrics) != 200) return std::nullopt;
  return MetricValue(metrics, series);
}

std::string ServeProcess::LastLoggedError() const {
  std::ifstream in(options_.log_path);
  std::string last_error;
  std::string last_line;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    last_line = line;
    if (line.find("[critical]") != std::string::npos || line.find("[error]") != std::string::npos) {
      last_error = line;
    }
  }
  std::string line = last_error.empty() ? last_line : last_error;
  // "[time] [level] [process pid] message"
  for (int field = 0; field < 3 && line.rfind("[", 0) == 0; ++field) {
    const size_t end = line.find("] ");
    if (end == std::string::npos) break;
    line.erase(0, end + 2);
  }
  return line.empty() ? absl::StrCat("see ", options_.log_path) : line;
}

}  // namespace gecd::loadgen
