#ifndef GECD_TLS_SERVER_TLS_H_
#define GECD_TLS_SERVER_TLS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "grpcpp/security/server_credentials.h"
#include "tls/checked_copy.h"
#include "tls/key_material_watcher.h"

// gRPC server credentials for the tls section (gecd serve's listener: TLS 1.2 or later, gRPC's
// ECDHE/AES-GCM cipher list; client certificates verified against tls.client_ca_file, and
// required with tls.require_client_cert) that follow the files as they rotate: new connections
// get the new pair, open ones keep theirs. gRPC's file watcher reads a CheckedCopy that a
// KeyMaterialWatcher replaces only with checked sets: a bad new pair is logged and the old one
// kept.
// Owns the copy and the watcher. Thread-safe: credentials() may be called from any thread.
namespace gecd::tls {

class ServerTls {
 public:
  // Fails, naming the key, the file and the reason, when a file is bad.
  static absl::StatusOr<std::unique_ptr<ServerTls>> Create(const config::TlsSection& tls);
  ~ServerTls() = default;
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }

 private:
  ServerTls() = default;

  std::unique_ptr<CheckedCopy> copy_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  std::unique_ptr<KeyMaterialWatcher> watcher_;  // last: stops before the copy goes
};

}  // namespace gecd::tls

#endif  // GECD_TLS_SERVER_TLS_H_
