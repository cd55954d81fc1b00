#ifndef GECD_DAEMON_OPEN_FILE_LIMIT_H_
#define GECD_DAEMON_OPEN_FILE_LIMIT_H_

#include <sys/resource.h>

#include "absl/status/statusor.h"

// The process's open-file limit (RLIMIT_NOFILE). Every connection to the metrics endpoint and
// to the workers' gRPC port is a file descriptor, and the usual soft limit (1024) would refuse
// the 1,001st before any server limit applied; the supervisor raises it once at start-up, and
// its children inherit it.
namespace gecd::daemon {

struct OpenFileLimit {
  rlim_t before = 0;  // the soft limit found
  rlim_t after = 0;   // the soft limit now: the hard limit
};

// Raises the soft limit to the hard one (unprivileged, so never above it).
absl::StatusOr<OpenFileLimit> RaiseOpenFileLimit();

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_OPEN_FILE_LIMIT_H_
