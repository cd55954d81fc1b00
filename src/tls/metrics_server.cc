#include "tls/metrics_server.h"

#include <chrono>
#include <optional>
#include <utility>

#include "common/status_macros.h"

namespace gecd::tls {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen_key, const std::string& listen,
    daemon::StatusHttpServer::Handlers handlers, const config::TlsSection& metrics_tls) {
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  if (metrics_tls.cert_file.empty()) {
    ASSIGN_OR_RETURN(m->server_, daemon::StatusHttpServer::Start(listen, std::move(handlers),
                                                                 std::nullopt, listen_key));
    return m;
  }
  // The first checked pair starts the server, each later one replaces its certificate.
  MetricsServer* self = m.get();
  auto apply = [self, listen_key, listen, handlers = std::move(handlers),
                require =
                    metrics_tls.require_client_cert](const KeyMaterial& material) -> absl::Status {
    daemon::StatusHttpServer::Certificate certificate{
        .certificate_chain = material.certificate_chain,
        .private_key = material.private_key,
        .client_ca = material.ca};
    if (self->server_ != nullptr) return self->server_->UseCertificate(certificate);
    ASSIGN_OR_RETURN(self->server_,
                     daemon::StatusHttpServer::Start(
                         listen, handlers,
                         daemon::StatusHttpServer::Https{.certificate = std::move(certificate),
                                                         .require_client_cert = require},
                         listen_key));
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(m->watcher_, KeyMaterialWatcher::Start(
                                    ServerFiles(metrics_tls, "metrics_tls"),
                                    std::chrono::seconds(metrics_tls.refresh_s), std::move(apply)));
  return m;
}

}  // namespace gecd::tls
