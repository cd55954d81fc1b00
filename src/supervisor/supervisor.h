#ifndef GECD_SUPERVISOR_SUPERVISOR_H_
#define GECD_SUPERVISOR_SUPERVISOR_H_

#include <chrono>

// The supervisor process (`gecd serve`, RunSupervisor in roles.h): owns the shared segment (its
// name is unlinked on every exit path), the engine and worker child processes (restarted when
// they die, with RestartBackoff), the /metrics /healthz /readyz endpoint and the systemd
// readiness notifications, and the SIGTERM drain.
namespace gecd::supervisor {

// How long to wait before restarting a process that died. The first death, and any death after
// at least kStableUptime of running, restart at once; each further quick death doubles the
// delay, from kFirstDelay up to kMaxDelay, so a crash loop neither spins nor floods the logs.
class RestartBackoff {
 public:
  static constexpr std::chrono::milliseconds kStableUptime{10'000};
  static constexpr std::chrono::milliseconds kFirstDelay{100};
  static constexpr std::chrono::milliseconds kMaxDelay{5'000};

  std::chrono::milliseconds OnExit(std::chrono::milliseconds uptime);

 private:
  int quick_exits_ = 0;
};

}  // namespace gecd::supervisor

#endif  // GECD_SUPERVISOR_SUPERVISOR_H_
