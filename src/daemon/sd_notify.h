#ifndef GECD_DAEMON_SD_NOTIFY_H_
#define GECD_DAEMON_SD_NOTIFY_H_

#include <string_view>

#include "absl/status/status.h"

// systemd's readiness protocol (sd_notify(3)) without libsystemd: one datagram to the unix
// socket named by $NOTIFY_SOCKET, a filesystem path or, with a leading '@', an abstract name.
namespace gecd::daemon {

// Sends `state` (e.g. "READY=1", "STOPPING=1"). OK and a no-op when NOTIFY_SOCKET is unset, so
// callers need not know whether they run under systemd Type=notify.
absl::Status NotifySystemd(std::string_view state);

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_SD_NOTIFY_H_
