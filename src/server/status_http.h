#ifndef GECD_SERVER_STATUS_HTTP_H_
#define GECD_SERVER_STATUS_HTTP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

// The supervisor's operator endpoint (server.metrics_listen): GET /metrics (Prometheus text),
// /healthz (200 while the process runs) and /readyz (200 only while `ready` says so, else 503).
// Owns the HTTP server and its threads; the destructor stops and joins them.
namespace gecd::server {

class StatusHttpServer {
 public:
  struct Handlers {
    std::function<std::string()> metrics;  // the /metrics body
    std::function<bool()> ready;
  };

  // Binds `listen` ("host:port", "[v6]:port"; port 0 picks one) before returning, so a taken
  // port is an error here, then serves on a thread of its own.
  static absl::StatusOr<std::unique_ptr<StatusHttpServer>> Start(const std::string& listen,
                                                                 Handlers handlers);
  ~StatusHttpServer();

  int port() const { return port_; }

 private:
  StatusHttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> listen_returned_{false};
  std::thread thread_;
  int port_ = 0;
};

}  // namespace gecd::server

#endif  // GECD_SERVER_STATUS_HTTP_H_
