#ifndef GECD_TLS_KEY_MATERIAL_H_
#define GECD_TLS_KEY_MATERIAL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "daemon/file_poller.h"

// The tls section's files, checked with OpenSSL before gRPC sees them: each error names the
// key, the file and the reason (unreadable, not PEM, expired or not yet valid, a key that is
// not the certificate's), so a bad file stops the start with a sentence instead of failing
// every handshake later.
namespace gecd::tls {

struct KeyMaterial {
  std::string certificate_chain;  // PEM, as read
  std::string private_key;        // PEM, as read
  std::string client_ca;          // PEM, as read; "" when tls.client_ca_file is not set
  std::string not_after;          // the server certificate's expiry, for the log
};

// The files a section names, in the order CheckKeyMaterial takes their contents: cert_file,
// key_file, then client_ca_file if set.
std::vector<std::string> KeyMaterialPaths(const config::TlsSection& tls);

// Checks what was read from KeyMaterialPaths(tls).
absl::StatusOr<KeyMaterial> CheckKeyMaterial(const config::TlsSection& tls,
                                             const daemon::FilePoller::Reading& files);

// Reads and checks the files.
absl::StatusOr<KeyMaterial> LoadKeyMaterial(const config::TlsSection& tls);

}  // namespace gecd::tls

#endif  // GECD_TLS_KEY_MATERIAL_H_
