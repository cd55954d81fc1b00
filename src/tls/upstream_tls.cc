#include "tls/upstream_tls.h"

#include <utility>

#include "common/status_macros.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "spdlog/spdlog.h"

namespace gecd::tls {

absl::StatusOr<std::unique_ptr<UpstreamTls>> UpstreamTls::Create(
    const config::UpstreamTlsSection& upstream) {
  std::unique_ptr<UpstreamTls> tls(new UpstreamTls(upstream.server_name));
  ASSIGN_OR_RETURN(tls->copy_, CheckedCopy::Create());
  UpstreamTls* self = tls.get();
  ASSIGN_OR_RETURN(tls->watcher_,
                   KeyMaterialWatcher::Start(
                       UpstreamFiles(upstream), std::chrono::seconds(upstream.refresh_s),
                       [self](const KeyMaterial& material) { return self->Use(material); }));
  const bool mutual = !upstream.cert_file.empty();
  const unsigned int refresh = static_cast<unsigned int>(upstream.refresh_s);
  auto provider = mutual ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                               tls->copy_->key_path(), tls->copy_->certificate_path(),
                               tls->copy_->ca_path(), refresh)
                         : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                               tls->copy_->ca_path(), refresh);
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider);
  options.watch_root_certs();
  if (mutual) options.watch_identity_key_cert_pairs();
  tls->credentials_ = grpc::experimental::TlsCredentials(options);
  spdlog::info("route: TLS to the endpoints, certificates verified against {}{}{}",
               upstream.ca_file,
               upstream.server_name.empty() ? "" : " for the name " + upstream.server_name,
               mutual ? ", client certificate " + upstream.cert_file : "");
  return tls;
}

absl::Status UpstreamTls::Use(const KeyMaterial& material) {
  ASSIGN_OR_RETURN(SslContext context, NewClientContext(material));
  RETURN_IF_ERROR(copy_->Stage(material));
  MutexLock lock(&mu_);
  context_ = std::move(context);
  return absl::OkStatus();
}

SslContext UpstreamTls::context() const {
  MutexLock lock(&mu_);
  return context_;
}

std::string UpstreamTls::PeerName(const std::string& host) const {
  return server_name_.empty() ? host : server_name_;
}

void UpstreamTls::AddChannelArguments(grpc::ChannelArguments& args) const {
  if (!server_name_.empty()) args.SetSslTargetNameOverride(server_name_);
}

}  // namespace gecd::tls
