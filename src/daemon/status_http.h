#ifndef GECD_DAEMON_STATUS_HTTP_H_
#define GECD_DAEMON_STATUS_HTTP_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct MHD_Daemon;

// The supervisor's operator endpoint (server.metrics_listen): GET /metrics (Prometheus text),
// /healthz (200 while the process runs) and /readyz (200 only while `ready` says so, else 503).
// Owns the listening socket and libmicrohttpd's event-loop thread (epoll): an idle or slow
// client costs a file descriptor and a small buffer, never a thread, so probes keep answering
// with thousands of such connections open. The destructor closes every connection and joins.
namespace gecd::daemon {

class StatusHttpServer {
 public:
  struct Handlers {
    std::function<std::string()> metrics;  // the /metrics body
    std::function<bool()> ready;
  };

  // A connection that sends nothing for this long (between requests, or within one) is closed.
  static constexpr std::chrono::seconds kConnectionTimeout{5};
  // Connections open at once; the next is accepted and closed at once.
  static constexpr unsigned kMaxConnections = 4096;
  // Connections the kernel queues before accept() (capped by net.core.somaxconn).
  static constexpr int kListenBacklog = 4096;
  // Each connection's buffer for its request line and headers; larger requests get 431.
  static constexpr size_t kConnectionMemory = 16 * 1024;

  // Binds `listen` ("host:port", "[v6]:port"; port 0 picks one) before returning, so a taken
  // port is an error here, then serves on a thread of its own.
  static absl::StatusOr<std::unique_ptr<StatusHttpServer>> Start(const std::string& listen,
                                                                 Handlers handlers);
  ~StatusHttpServer();
  StatusHttpServer(const StatusHttpServer&) = delete;
  StatusHttpServer& operator=(const StatusHttpServer&) = delete;

  int port() const { return port_; }

 private:
  explicit StatusHttpServer(Handlers handlers) : handlers_(std::move(handlers)) {}

  const Handlers handlers_;  // read by the server's thread through its callback
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_STATUS_HTTP_H_
