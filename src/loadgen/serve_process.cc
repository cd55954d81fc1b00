#include "loadgen/serve_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/loopback.h"
#include "common/status_macros.h"

namespace gecd::load {
namespace {

using Clock = std::chrono::steady_clock;

std::string ExitDescription(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return absl::StrCat("was killed by signal ", WTERMSIG(wait_status));
  return "ended";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServeProcess>> ServeProcess::Start(const ServeOptions& options) {
  ASSIGN_OR_RETURN(const int grpc_port, FreeLoopbackPort());
  ASSIGN_OR_RETURN(const int metrics_port, FreeLoopbackPort());
  std::unique_ptr<ServeProcess> p(new ServeProcess(options, grpc_port, metrics_port));
  std::vector<std::string> args = {"gecd", "serve"};
  if (!options.config_path.empty()) {
    args.push_back("--config");
    args.push_back(options.config_path);
  }
  std::vector<std::string> sets = options.sets;
  sets.push_back(absl::StrCat("server.listen=127.0.0.1:", grpc_port));
  sets.push_back(absl::StrCat("server.metrics_listen=127.0.0.1:", metrics_port));
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log = open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", options.log_path, ": ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  p->pid_ = fork();
  if (p->pid_ == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the parent died before prctl
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    execv(options.binary.c_str(), argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", options.binary.c_str(), std::strerror(errno));
    _exit(127);
  }
  close(log);
  if (p->pid_ < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options.ready_timeout_s));
  while (HttpGet(metrics_port, "/readyz") != 200) {
    int status = 0;
    if (waitpid(p->pid_, &status, WNOHANG) == p->pid_) {
      p->exited_ = true;
      return absl::FailedPreconditionError(absl::StrCat(
          "gecd serve ", ExitDescription(status), " before it was ready: ", p->LastLoggedError()));
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
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options_.stop_timeout_s));
  while (waitpid(pid_, nullptr, WNOHANG) != pid_) {
    if (Clock::now() > deadline) {
      kill(pid_, SIGKILL);  // its children get SIGKILL from the kernel (PR_SET_PDEATHSIG)
      waitpid(pid_, nullptr, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
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

}  // namespace gecd::load
