#ifndef GECD_TLS_SERVER_TLS_H_
#define GECD_TLS_SERVER_TLS_H_

#include <ctime>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "config/config.h"
#include "daemon/file_poller.h"
#include "grpcpp/security/server_credentials.h"
#include "tls/key_material.h"

// gRPC server credentials for the tls section (TLS 1.2 or later, gRPC's ECDHE/AES-GCM cipher
// list; client certificates verified against tls.client_ca_file, and required with
// tls.require_client_cert) that follow the files as they rotate: new connections get the new
// pair, open ones keep theirs.
//
// gRPC's own FileWatcherCertificateProvider re-reads files, but it serves whatever it finds (a
// key that is not the certificate's, a half-written file) and an unreadable file leaves it
// with no certificate at all. So it watches a private copy instead, which this class replaces
// only with files that passed CheckKeyMaterial: a bad new pair is logged and the old one kept.
// The copy is a 0700 directory (in /dev/shm when there is one, so keys stay off disk) whose
// `current` symlink is swapped in one rename, each generation with a later mtime, so gRPC's
// read (key, then certificate, checked by mtime) never pairs files of two generations.
//
// Owns the copy (removed by the destructor) and the FilePoller on the operator's files.
// Thread-safe: credentials() may be called from any thread.
namespace gecd::tls {

class ServerTls {
 public:
  // Fails, naming the key, the file and the reason, when a file is bad.
  static absl::StatusOr<std::unique_ptr<ServerTls>> Create(const config::TlsSection& tls);
  ~ServerTls();
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }

 private:
  ServerTls(const config::TlsSection& tls, std::string dir);
  // Writes `material` as the next generation and points `current` at it.
  absl::Status Stage(const KeyMaterial& material) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnChange(const daemon::FilePoller::Reading& files) ABSL_LOCKS_EXCLUDED(mu_);

  const config::TlsSection tls_;
  const std::string dir_;  // the private copy
  Mutex mu_;
  int generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::time_t stamp_ ABSL_GUARDED_BY(mu_) = 0;  // the last generation's mtime
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  std::unique_ptr<daemon::FilePoller> poller_;  // last: stops before the rest goes
};

}  // namespace gecd::tls

#endif  // GECD_TLS_SERVER_TLS_H_
