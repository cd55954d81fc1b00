#include "common/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace gecd {
namespace {

// In a forked child before exec: writes `what` and errno's text to stderr, with write(2) only.
void SayWhyInChild(const std::string& what) {
  const char* why = strerror(errno);
  (void)!write(STDERR_FILENO, what.data(), what.size());
  (void)!write(STDERR_FILENO, why, strlen(why));
  (void)!write(STDERR_FILENO, "\n", 1);
}

}  // namespace

absl::StatusOr<pid_t> SpawnProcess(const ChildProcessOptions& options) {
  // Between fork and exec only async-signal-safe calls: another thread may hold the
  // allocator's lock. So every string and array is built here.
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = options.env;
  std::vector<char*> envp;
  for (std::string& var : env) envp.push_back(var.data());
  envp.push_back(nullptr);
  const std::string exec_failed = absl::StrCat("cannot run ", options.executable, ": ");
  int log = -1;
  if (!options.log_path.empty()) {
    log = open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log < 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write ", options.log_path, ": ", std::strerror(errno)));
    }
  }
  sigset_t none;
  sigemptyset(&none);
  // getpriority may return -1 as a value: errno tells. A caller whose own priority cannot be
  // read starts its children from 0.
  errno = 0;
  const int own_nice = getpriority(PRIO_PROCESS, 0);
  const int child_nice = std::min((errno == 0 ? own_nice : 0) + options.nice_increment, 19);
  const std::string nice_failed = "cannot lower the process's CPU priority: ";
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    if (options.clear_signal_mask) sigprocmask(SIG_SETMASK, &none, nullptr);
    if (options.own_process_group) setpgid(0, 0);
    if (options.parent_death_signal != 0) {
      prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
      if (getppid() != parent) _exit(1);  // the parent died before prctl
    }
    if (log >= 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
    }
    if (options.close_inherited_fds) close_range(3, ~0U, 0);
    // Raising a nice value needs no privilege; should it fail all the same, the child runs
    // at the caller's priority and says so.
    if (options.nice_increment > 0 && setpriority(PRIO_PROCESS, 0, child_nice) != 0) {
      SayWhyInChild(nice_failed);
    }
    execve(options.executable.c_str(), argv.data(), envp.data());
    SayWhyInChild(exec_failed);
    _exit(127);
  }
  const int fork_errno = errno;
  if (log >= 0) close(log);
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(fork_errno)));
  return pid;
}

std::vector<std::string> ProcessEnvironment(const std::vector<std::string_view>& drop,
                                            const std::vector<std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view var(*e);
    const bool dropped = std::any_of(drop.begin(), drop.end(), [&](std::string_view k) {
      return var.size() > k.size() && var.substr(0, k.size()) == k && var[k.size()] == '=';
    });
    if (!dropped) env.emplace_back(var);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

std::optional<int> WaitChildExit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(wait_status), " (",
                        strsignal(WTERMSIG(wait_status)), ")");
  }
  return "stopped";
}

}  // namespace gecd
