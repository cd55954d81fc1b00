#ifndef GECD_COMMON_LOGGING_H_
#define GECD_COMMON_LOGGING_H_

#include <string_view>

#include "absl/status/status.h"

// Process-wide spdlog setup. Every gecd process logs to stderr through the default spdlog
// logger; each line names the process role ("supervisor", "engine", "worker 3") and pid so the
// interleaved output of one server instance can be told apart. Callers add request ids to the
// message themselves.
namespace gecd {

// level: trace | debug | info | warn | error. format: "text" (human-readable lines) or "json"
// (one object per line: ts, level, role, pid, msg; ts in UTC, RFC 3339). Replaces the default
// logger; call once, early, before other threads log.
absl::Status SetUpLogging(std::string_view role, std::string_view level, std::string_view format);

}  // namespace gecd

#endif  // GECD_COMMON_LOGGING_H_
