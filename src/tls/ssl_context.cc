#include "tls/ssl_context.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tls/openssl_handles.h"

namespace gecd::tls {
namespace {

// TLS 1.2: forward secrecy (ECDHE) and AEAD only. TLS 1.3's suites are all both.
constexpr char kTls12Ciphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
constexpr unsigned char kAlpnH2[] = {2, 'h', '2'};

absl::Status Failed(const char* what) {
  return absl::InternalError(absl::StrCat("tls: ", what, ": ", SslErrorText("failed")));
}

// The policy both sides share.
absl::StatusOr<SslContext> NewContext(const SSL_METHOD* method) {
  SslContext context(SSL_CTX_new(method), SslContextFree());
  if (context == nullptr) return Failed("SSL_CTX_new");
  SSL_CTX* c = context.get();
  SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
  SSL_CTX_set_options(
      c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_set_cipher_list(c, kTls12Ciphers) != 1) return Failed("the cipher list");
  // The relay retries a write with the same bytes at a moved pointer, in pieces.
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                          SSL_MODE_RELEASE_BUFFERS);
  return context;
}

// The certificate chain (leaf first) and key of `material` into `c`.
absl::Status UseCertificate(SSL_CTX* c, const KeyMaterial& material) {
  Bio chain = MemoryBio(material.certificate_chain);
  Certificate leaf(PEM_read_bio_X509(chain.get(), nullptr, nullptr, nullptr));
  if (leaf == nullptr || SSL_CTX_use_certificate(c, leaf.get()) != 1) {
    return Failed("the certificate");
  }
  while (X509* extra = PEM_read_bio_X509(chain.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(c, extra) != 1) {  // takes `extra` when it succeeds
      X509_free(extra);
      return Failed("the certificate chain");
    }
  }
  ERR_clear_error();  // the end of the bundle reads as an error
  Bio key_bio = MemoryBio(material.private_key);
  PrivateKey key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr || SSL_CTX_use_PrivateKey(c, key.get()) != 1 ||
      SSL_CTX_check_private_key(c) != 1) {
    return Failed("the private key");
  }
  return absl::OkStatus();
}

// Every certificate of `pem` into the context's trust store; `names` also lists them as the
// CAs a server asks client certificates of.
absl::Status TrustCas(SSL_CTX* c, const std::string& pem, bool names) {
  X509_STORE* store = SSL_CTX_get_cert_store(c);
  Bio bio = MemoryBio(pem);
  STACK_OF(X509_NAME)* ca_names = names ? sk_X509_NAME_new_null() : nullptr;
  int count = 0;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    Certificate owned(x);
    if (X509_STORE_add_cert(store, x) != 1) {
      ERR_clear_error();  // the same CA twice in a bundle is harmless
    }
    if (ca_names != nullptr) sk_X509_NAME_push(ca_names, X509_NAME_dup(X509_get_subject_name(x)));
    ++count;
  }
  ERR_clear_error();
  if (ca_names != nullptr) SSL_CTX_set_client_CA_list(c, ca_names);  // takes the list
  if (count == 0) return absl::InvalidArgumentError("tls: no CA certificate");
  return absl::OkStatus();
}

int SelectH2(SSL*, const unsigned char** out, unsigned char* out_size, const unsigned char* in,
             unsigned int in_size, void*) {
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_size, kAlpnH2, sizeof kAlpnH2, in, in_size) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;  // gRPC is HTTP/2 only
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

std::string SslErrorText(const char* fallback) {
  const unsigned long error = ERR_get_error();
  ERR_clear_error();
  if (error == 0) return fallback;
  char text[256];
  ERR_error_string_n(error, text, sizeof text);
  const char* reason = ERR_reason_error_string(error);
  return reason != nullptr ? std::string(reason) : std::string(text);
}

absl::StatusOr<SslContext> NewServerContext(const KeyMaterial& material, bool require_client_cert) {
  absl::StatusOr<SslContext> context = NewContext(TLS_server_method());
  if (!context.ok()) return context.status();
  SSL_CTX* c = context->get();
  if (absl::Status used = UseCertificate(c, material); !used.ok()) return used;
  if (!material.ca.empty()) {
    if (absl::Status trusted = TrustCas(c, material.ca, /*names=*/true); !trusted.ok()) {
      return trusted;
    }
    SSL_CTX_set_verify(
        c, SSL_VERIFY_PEER | (require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nullptr);
  }
  SSL_CTX_set_alpn_select_cb(c, SelectH2, nullptr);
  // Sessions are not resumed: connections are long-lived, and a ticket key per context would
  // outlive a rotation.
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(c, 0);
  return context;
}

absl::StatusOr<SslContext> NewClientContext(const KeyMaterial& material) {
  absl::StatusOr<SslContext> context = NewContext(TLS_client_method());
  if (!context.ok()) return context.status();
  SSL_CTX* c = context->get();
  if (!material.certificate_chain.empty()) {
    if (absl::Status used = UseCertificate(c, material); !used.ok()) return used;
  }
  if (absl::Status trusted = TrustCas(c, material.ca, /*names=*/false); !trusted.ok()) {
    return trusted;
  }
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_alpn_protos(c, kAlpnH2, sizeof kAlpnH2);
  return context;
}

}  // namespace gecd::tls
