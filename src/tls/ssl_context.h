#ifndef GECD_TLS_SSL_CONTEXT_H_
#define GECD_TLS_SSL_CONTEXT_H_

#include <openssl/ssl.h>

#include <memory>

#include "absl/status/statusor.h"
#include "tls/key_material.h"

// OpenSSL contexts with gecd's TLS policy, for the router's own TLS (its listener, its
// connections to the endpoints): TLS 1.2 or later; in TLS 1.2 only ECDHE key exchange with
// AEAD ciphers (AES-GCM, ChaCha20-Poly1305), TLS 1.3's suites (all AEAD) as they are; no
// renegotiation, no compression; ALPN h2. A context is immutable once made and shared by the
// connections made from it (each SSL holds a reference of its own), so a rotation replaces the
// context and the connections open on the old one keep it until they close.
namespace gecd::tls {

struct SslContextFree {
  void operator()(SSL_CTX* context) const { SSL_CTX_free(context); }
};
// A context made here: shared by whoever hands it to new connections.
using SslContext = std::shared_ptr<SSL_CTX>;

// A server's: `material`'s certificate and key; with its CAs, client certificates are asked
// for and verified against them, and refused when absent if `require_client_cert`. ALPN: h2
// when the client offers it, a refusal when it offers only other protocols.
absl::StatusOr<SslContext> NewServerContext(const KeyMaterial& material, bool require_client_cert);

// A client's: the server's certificate verified against `material`'s CAs; `material`'s
// certificate and key presented when the server asks (mTLS), if it has them. ALPN h2.
absl::StatusOr<SslContext> NewClientContext(const KeyMaterial& material);

// OpenSSL's first queued error, as a sentence (and the queue emptied); `fallback` when none.
std::string SslErrorText(const char* fallback);

}  // namespace gecd::tls

#endif  // GECD_TLS_SSL_CONTEXT_H_
