#ifndef GECD_COMMON_CHILD_PROCESS_H_
#define GECD_COMMON_CHILD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// The one fork-and-exec of a child process (the daemons `gecd tune` and the tests start, and the
// supervisor's engine and workers), the environment to give it, the wait for its exit and how
// that exit reads. Plain system calls only, so tests (with or without the daemon built),
// `gecd tune` and the supervisor share them. Thread-safe: no state (SpawnProcess may be called
// from a multithreaded parent).
namespace gecd {

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
  // How much lower the child's CPU priority is than the caller's: its nice value is the
  // caller's plus this (at most 19), for the child and every thread it starts. 0: the same.
  int nice_increment = 0;
};

// Forks and execs `options`; the child's pid, which the caller owns (reaps). PermissionDenied
// when the log cannot be written, Internal when fork fails. A child whose exec fails writes why
// to its stderr and exits 127.
absl::StatusOr<pid_t> SpawnProcess(const ChildProcessOptions& options);

// This process's environment without the variables named in `drop`, then `set` (KEY=VALUE).
// Reads `environ`: not safe against a concurrent setenv.
std::vector<std::string> ProcessEnvironment(const std::vector<std::string_view>& drop,
                                            const std::vector<std::string>& set);

// The wait status of child `pid` once it exits within `timeout` (polled every 20 ms); nullopt
// while it still runs. Reaps the child when it has exited.
std::optional<int> WaitChildExit(pid_t pid, std::chrono::milliseconds timeout);

// How a wait status reads in a message: "exited with code 2", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

}  // namespace gecd

#endif  // GECD_COMMON_CHILD_PROCESS_H_
