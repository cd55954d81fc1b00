#include "tls/listener_tls.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace gecd::tls {

absl::StatusOr<std::unique_ptr<ListenerTls>> ListenerTls::Create(const config::TlsSection& tls) {
  std::unique_ptr<ListenerTls> listener(new ListenerTls());
  ListenerTls* self = listener.get();
  const bool require = tls.require_client_cert;
  absl::StatusOr<std::unique_ptr<KeyMaterialWatcher>> watcher = KeyMaterialWatcher::Start(
      ServerFiles(tls), std::chrono::seconds(tls.refresh_s),
      [self, require](const KeyMaterial& material) { return self->Use(material, require); });
  if (!watcher.ok()) return watcher.status();
  listener->watcher_ = *std::move(watcher);
  if (!tls.client_ca_file.empty()) {
    spdlog::info("tls: client certificates from {} {}", tls.client_ca_file,
                 require ? "required" : "verified if sent");
  }
  return listener;
}

absl::Status ListenerTls::Use(const KeyMaterial& material, bool require_client_cert) {
  absl::StatusOr<SslContext> context = NewServerContext(material, require_client_cert);
  if (!context.ok()) return context.status();
  MutexLock lock(&mu_);
  context_ = *std::move(context);
  return absl::OkStatus();
}

SslContext ListenerTls::context() const {
  MutexLock lock(&mu_);
  return context_;
}

}  // namespace gecd::tls
