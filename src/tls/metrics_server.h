#ifndef GECD_TLS_METRICS_SERVER_H_
#define GECD_TLS_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "daemon/status_http.h"
#include "tls/key_material_watcher.h"

// The metrics listener of the command that runs (gecd serve's server.metrics_listen, gecd
// route's route.metrics_listen): plain HTTP, or HTTPS with the metrics_tls section when
// metrics_tls.cert_file is set, its files followed as they rotate as the tls section's are
// (KeyMaterialWatcher: a valid new pair serves the next connections, open ones finish on
// theirs; a bad one is logged and the pair in use kept).
// Owns the server and the watcher. Thread-safe as daemon::StatusHttpServer.
namespace gecd::tls {

class MetricsServer {
 public:
  // Serves `listen`, the value of the config key `listen_key`. Fails, naming the key, the file
  // and the reason, when a file is bad, and naming `listen_key` when it cannot serve there.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen_key, const std::string& listen,
      daemon::StatusHttpServer::Handlers handlers, const config::TlsSection& metrics_tls);
  ~MetricsServer() = default;
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return server_->port(); }
  bool https() const { return server_->https(); }

 private:
  MetricsServer() = default;

  // Set once, by Start or by the watcher's first apply (on Start's thread, before the
  // watcher's own thread exists); only used after that.
  std::unique_ptr<daemon::StatusHttpServer> server_;
  std::unique_ptr<KeyMaterialWatcher> watcher_;  // null for plain HTTP; last: stops first
};

}  // namespace gecd::tls

#endif  // GECD_TLS_METRICS_SERVER_H_
