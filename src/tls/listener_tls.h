#ifndef GECD_TLS_LISTENER_TLS_H_
#define GECD_TLS_LISTENER_TLS_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "config/config.h"
#include "tls/key_material_watcher.h"
#include "tls/ssl_context.h"

// The OpenSSL server context of a listener that does its own TLS (gecd route's route.listen)
// for the tls section, following the files as they rotate: context() is the latest checked
// pair's (gecd's policy, tls/ssl_context.h; client certificates asked for and verified with
// tls.client_ca_file, required with tls.require_client_cert), so new connections take the new
// pair and open ones keep the context they were made from. A bad new pair is logged and the
// old one kept (KeyMaterialWatcher).
// Owns the watcher and the current context. Thread-safe: context() from any thread.
namespace gecd::tls {

class ListenerTls {
 public:
  // Fails, naming the key, the file and the reason, when a file is bad.
  static absl::StatusOr<std::unique_ptr<ListenerTls>> Create(const config::TlsSection& tls);
  ~ListenerTls() = default;
  ListenerTls(const ListenerTls&) = delete;
  ListenerTls& operator=(const ListenerTls&) = delete;

  SslContext context() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ListenerTls() = default;
  absl::Status Use(const KeyMaterial& material, bool require_client_cert) ABSL_LOCKS_EXCLUDED(mu_);

  mutable Mutex mu_;
  SslContext context_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<KeyMaterialWatcher> watcher_;  // last: stops before the rest goes
};

}  // namespace gecd::tls

#endif  // GECD_TLS_LISTENER_TLS_H_
