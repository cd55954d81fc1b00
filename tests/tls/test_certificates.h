#ifndef GECD_TESTS_TLS_TEST_CERTIFICATES_H_
#define GECD_TESTS_TLS_TEST_CERTIFICATES_H_

#include <memory>
#include <string>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "grpcpp/security/credentials.h"

// Certificates made with OpenSSL when a test runs, so that no private key is ever committed:
// a self-signed CA (EC P-256) and server or client certificates it signs, for "localhost" and
// 127.0.0.1; and the clients' side of the TLS tests (gRPC, bare handshakes, HTTPS). Not
// thread-safe; tests use one from one thread.
namespace gecd::testing {

struct PemPair {
  std::string certificate;
  std::string key;
};

class TestCa {
 public:
  explicit TestCa(const std::string& name);
  ~TestCa();
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;

  const std::string& certificate() const { return certificate_pem_; }
  // Valid from now + not_before_s to now + not_after_s (negative: in the past).
  PemPair Issue(const std::string& common_name, long not_before_s = -3600,
                long not_after_s = 24 * 3600) const;

 private:
  EVP_PKEY* key_ = nullptr;
  X509* certificate_ = nullptr;
  std::string certificate_pem_;
};

// Writes `bytes` to `path` (replacing it), failing the test if it cannot.
void WriteTestFile(const std::string& path, const std::string& bytes);
// Writes `pair`'s certificate to `cert_path` and its key to `key_path`.
void WritePemPair(const PemPair& pair, const std::string& cert_path, const std::string& key_path);

// gRPC client credentials that trust `ca` and, if given, present `client` (mTLS).
std::shared_ptr<grpc::ChannelCredentials> Trusting(const TestCa& ca,
                                                   const PemPair* client = nullptr);

// An HTTPS client of the metrics listener: one connection to 127.0.0.1:`port` (OpenSSL, TLS 1.2
// or later), the server's certificate verified against `ca` (and for 127.0.0.1), `client`
// presented when the server asks, if given; HTTP/1.1 GETs one after another on it
// (keep-alive). Every socket operation gives up after 5 s, so no test waits longer on a server
// that does not answer.
class HttpsConnection {
 public:
  HttpsConnection(int port, const std::string& ca, const PemPair* client = nullptr);
  ~HttpsConnection();
  HttpsConnection(const HttpsConnection&) = delete;
  HttpsConnection& operator=(const HttpsConnection&) = delete;

  bool connected() const { return connected_; }
  // The certificate the server presented (PEM), "" without a handshake.
  const std::string& server_certificate() const { return server_certificate_; }
  // GET `path`: the status (0: no answer, or the connection was closed), the body in `body`.
  int Get(const std::string& path, std::string* body = nullptr);

 private:
  SSL_CTX* context_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool connected_ = false;
  std::string server_certificate_;
  std::string buffered_;  // read past the last response
};

// One GET over a new HttpsConnection: the status (0: no answer), the body in `body`.
int HttpsGet(int port, const std::string& path, const std::string& ca,
             const PemPair* client = nullptr, std::string* body = nullptr);

// A bare OpenSSL handshake with 127.0.0.1:`port`, offering ALPN h2, the protocol versions
// capped at `max_version` (TLS1_1_VERSION, ...) and, if set, only `ciphers` (TLS 1.2 names):
// whether it completes.
bool TlsHandshakes(int port, int max_version, const char* ciphers = nullptr);

}  // namespace gecd::testing

#endif  // GECD_TESTS_TLS_TEST_CERTIFICATES_H_
