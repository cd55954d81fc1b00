#ifndef GECD_COMMON_LOOPBACK_H_
#define GECD_COMMON_LOOPBACK_H_

#include <netinet/in.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"

// What a process on the same machine uses to watch a gecd daemon: a free port to give it, a
// plain HTTP/1.1 GET of its /readyz or /metrics, and one sample of that page (the daemon itself
// is started with common/child_process.h). Blocking sockets and plain system calls only, so
// tests (with or without the daemon built), `gecd tune` and the supervisor share them.
// Thread-safe: no state.
namespace gecd {

// 127.0.0.1:`port`, for bind and connect.
sockaddr_in LoopbackAddress(int port);

// A 127.0.0.1 TCP port free at the time of asking (whoever asked binds it right after).
absl::StatusOr<int> FreeLoopbackPort();

// GET http://127.0.0.1:`port``path` with a 10 s timeout per socket operation: the status
// (0: no answer), the body in `body` (the response is read until the server closes).
int HttpGet(int port, const std::string& path, std::string* body = nullptr);

// The value of the sample `series` (e.g. `gecd_requests_total{code="OK"}` or
// `gecd_request_concurrency`) in Prometheus text `metrics`; nullopt when absent.
std::optional<double> MetricValue(const std::string& metrics, const std::string& series);

}  // namespace gecd

#endif  // GECD_COMMON_LOOPBACK_H_
