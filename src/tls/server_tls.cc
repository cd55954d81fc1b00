#include "tls/server_tls.h"

#include <utility>

#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "spdlog/spdlog.h"

namespace gecd::tls {

absl::StatusOr<std::unique_ptr<ServerTls>> ServerTls::Create(const config::TlsSection& tls) {
  std::unique_ptr<ServerTls> server_tls(new ServerTls());
  absl::StatusOr<std::unique_ptr<CheckedCopy>> copy = CheckedCopy::Create();
  if (!copy.ok()) return copy.status();
  server_tls->copy_ = *std::move(copy);
  CheckedCopy* staged = server_tls->copy_.get();
  absl::StatusOr<std::unique_ptr<KeyMaterialWatcher>> watcher = KeyMaterialWatcher::Start(
      ServerFiles(tls), std::chrono::seconds(tls.refresh_s),
      [staged](const KeyMaterial& material) { return staged->Stage(material); });
  if (!watcher.ok()) return watcher.status();
  server_tls->watcher_ = *std::move(watcher);

  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      staged->key_path(), staged->certificate_path(),
      tls.client_ca_file.empty() ? "" : staged->ca_path(),
      static_cast<unsigned int>(tls.refresh_s));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!tls.client_ca_file.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(tls.require_client_cert
                                      ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                      : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    spdlog::info("tls: client certificates from {} {}", tls.client_ca_file,
                 tls.require_client_cert ? "required" : "verified if sent");
  }
  server_tls->credentials_ = grpc::experimental::TlsServerCredentials(options);
  return server_tls;
}

}  // namespace gecd::tls
