#ifndef GECD_TLS_KEY_MATERIAL_H_
#define GECD_TLS_KEY_MATERIAL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config/config.h"
#include "daemon/file_poller.h"

// The files of a TLS setting (the tls and metrics_tls sections, route.upstream_tls), checked
// with OpenSSL before anything serves them: each error names the key, the file and the reason
// (unreadable, not PEM, expired or not yet valid, a key that is not the certificate's), so a bad
// file stops the start with a sentence instead of failing every handshake later.
namespace gecd::tls {

// Which files, and the config keys that name them (for messages). A certificate and its key
// (both or neither; a server always has them, a client only for mTLS) and the CAs the peer's
// certificate is verified against ("" for none).
struct KeyMaterialFiles {
  std::string cert_key = "tls.cert_file";
  std::string cert_file;
  std::string key_key = "tls.key_file";
  std::string key_file;
  std::string ca_key = "tls.client_ca_file";
  std::string ca_file;

  // The files set, in the order CheckKeyMaterial takes their contents: cert_file, key_file,
  // ca_file.
  std::vector<std::string> Paths() const;
};

// A TLS section's files (tls, metrics_tls: `section` names its keys in messages).
KeyMaterialFiles ServerFiles(const config::TlsSection& tls, absl::string_view section = "tls");
KeyMaterialFiles UpstreamFiles(const config::UpstreamTlsSection& upstream);

struct KeyMaterial {
  std::string certificate_chain;  // PEM, as read; "" without cert_file
  std::string private_key;        // PEM, as read; "" without key_file
  std::string ca;                 // PEM, as read; "" without ca_file
  std::string not_after;          // the certificate's expiry, for the log ("" without one)
};

// Checks what was read from files.Paths().
absl::StatusOr<KeyMaterial> CheckKeyMaterial(const KeyMaterialFiles& files,
                                             const daemon::FilePoller::Reading& reading);

// Reads and checks the files.
absl::StatusOr<KeyMaterial> LoadKeyMaterial(const KeyMaterialFiles& files);
inline absl::StatusOr<KeyMaterial> LoadKeyMaterial(const config::TlsSection& tls,
                                                   absl::string_view section = "tls") {
  return LoadKeyMaterial(ServerFiles(tls, section));
}

}  // namespace gecd::tls

#endif  // GECD_TLS_KEY_MATERIAL_H_
