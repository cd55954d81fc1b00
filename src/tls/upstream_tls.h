#ifndef GECD_TLS_UPSTREAM_TLS_H_
#define GECD_TLS_UPSTREAM_TLS_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "config/config.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "tls/checked_copy.h"
#include "tls/key_material_watcher.h"
#include "tls/ssl_context.h"

// TLS from gecd route to its endpoints (route.upstream_tls), both ways the router reaches a
// pod: an OpenSSL client context for the relay's own connections (context()), and gRPC channel
// credentials for its health checks (credentials(), reading a CheckedCopy). Both verify the
// pod's certificate against route.upstream_tls.ca_file and present the router's client
// certificate (mTLS) when one is set, and both follow the files as they rotate: new
// connections take the new pair, a bad new pair is logged and the old one kept.
// Owns the watcher, the copy and the current context. Thread-safe.
namespace gecd::tls {

class UpstreamTls {
 public:
  // Fails, naming the key, the file and the reason, when a file is bad.
  static absl::StatusOr<std::unique_ptr<UpstreamTls>> Create(
      const config::UpstreamTlsSection& upstream);
  ~UpstreamTls() = default;
  UpstreamTls(const UpstreamTls&) = delete;
  UpstreamTls& operator=(const UpstreamTls&) = delete;

  SslContext context() const ABSL_LOCKS_EXCLUDED(mu_);
  // The name an endpoint at `host` must prove: route.upstream_tls.server_name, else `host`.
  std::string PeerName(const std::string& host) const;

  std::shared_ptr<grpc::ChannelCredentials> credentials() const { return credentials_; }
  // Channel arguments the credentials need (the server name override, when set).
  void AddChannelArguments(grpc::ChannelArguments& args) const;

 private:
  explicit UpstreamTls(std::string server_name) : server_name_(std::move(server_name)) {}
  absl::Status Use(const KeyMaterial& material) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string server_name_;
  mutable Mutex mu_;
  SslContext context_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CheckedCopy> copy_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::unique_ptr<KeyMaterialWatcher> watcher_;  // last: stops before the rest goes
};

}  // namespace gecd::tls

#endif  // GECD_TLS_UPSTREAM_TLS_H_
