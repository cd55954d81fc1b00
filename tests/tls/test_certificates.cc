#include "tls/test_certificates.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gecd::testing {
namespace {

EVP_PKEY* NewKey() { return EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"); }

void AddExtension(X509* certificate, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  X509_add_ext(certificate, extension, -1);
  X509_EXTENSION_free(extension);
}

X509* NewCertificate(const std::string& common_name, EVP_PKEY* key, long not_before_s,
                     long not_after_s) {
  static long serial = 1;
  X509* certificate = X509_new();
  X509_set_version(certificate, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(certificate), serial++);
  X509_gmtime_adj(X509_getm_notBefore(certificate), not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(certificate), not_after_s);
  X509_set_pubkey(certificate, key);
  X509_NAME* name = X509_get_subject_name(certificate);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  return certificate;
}

std::string Pem(X509* certificate) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, certificate);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(size));
  BIO_free(bio);
  return pem;
}

std::string Pem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(size));
  BIO_free(bio);
  return pem;
}

// A blocking TCP connection to 127.0.0.1:`port` whose reads and writes give up after 5 s; -1
// when it cannot connect.
int ConnectWithTimeouts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const timeval timeout{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TestCa::TestCa(const std::string& name) : key_(NewKey()) {
  certificate_ = NewCertificate(name, key_, -3600, 7 * 24 * 3600);
  X509_set_issuer_name(certificate_, X509_get_subject_name(certificate_));
  AddExtension(certificate_, certificate_, NID_basic_constraints, "critical,CA:TRUE");
  AddExtension(certificate_, certificate_, NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExtension(certificate_, certificate_, NID_subject_key_identifier, "hash");
  X509_sign(certificate_, key_, EVP_sha256());
  certificate_pem_ = Pem(certificate_);
}

TestCa::~TestCa() {
  X509_free(certificate_);
  EVP_PKEY_free(key_);
}

PemPair TestCa::Issue(const std::string& common_name, long not_before_s, long not_after_s) const {
  EVP_PKEY* key = NewKey();
  X509* certificate = NewCertificate(common_name, key, not_before_s, not_after_s);
  X509_set_issuer_name(certificate, X509_get_subject_name(certificate_));
  AddExtension(certificate, certificate_, NID_basic_constraints, "critical,CA:FALSE");
  AddExtension(certificate, certificate_, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
  AddExtension(certificate, certificate_, NID_ext_key_usage, "serverAuth,clientAuth");
  AddExtension(certificate, certificate_, NID_authority_key_identifier, "keyid:always");
  X509_sign(certificate, key_, EVP_sha256());
  PemPair pair{Pem(certificate), Pem(key)};
  X509_free(certificate);
  EVP_PKEY_free(key);
  return pair;
}

void WriteTestFile(const std::string& path, const std::string& bytes) {
  // Beside it, then renamed over it: the daemon polling the file never reads half of it.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << bytes;
    ASSERT_TRUE(out.good()) << "cannot write " << temporary;
  }
  ASSERT_EQ(std::rename(temporary.c_str(), path.c_str()), 0) << "cannot rename to " << path;
}

void WritePemPair(const PemPair& pair, const std::string& cert_path, const std::string& key_path) {
  WriteTestFile(cert_path, pair.certificate);
  WriteTestFile(key_path, pair.key);
}

std::shared_ptr<grpc::ChannelCredentials> Trusting(const TestCa& ca, const PemPair* client) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca.certificate();
  if (client != nullptr) {
    options.pem_cert_chain = client->certificate;
    options.pem_private_key = client->key;
  }
  return grpc::SslCredentials(options);
}

bool TlsHandshakes(int port, int max_version, const char* ciphers) {
  SSL_CTX* context = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(context, TLS1_VERSION);
  SSL_CTX_set_max_proto_version(context, max_version);
  SSL_CTX_set_security_level(context, 0);  // let the client offer TLS 1.0/1.1 at all
  if (ciphers != nullptr) SSL_CTX_set_cipher_list(context, ciphers);
  static const unsigned char kH2[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(context, kH2, sizeof(kH2));
  BIO* bio = BIO_new_connect(absl::StrCat("127.0.0.1:", port).c_str());
  SSL* ssl = SSL_new(context);
  bool done = false;
  if (BIO_do_connect(bio) == 1) {
    SSL_set_bio(ssl, bio, bio);
    bio = nullptr;  // owned by ssl now
    done = SSL_connect(ssl) == 1;
  }
  if (bio != nullptr) BIO_free(bio);
  SSL_free(ssl);
  SSL_CTX_free(context);
  return done;
}

HttpsConnection::HttpsConnection(int port, const std::string& ca, const PemPair* client) {
  // A write to a connection the server has closed fails here instead of killing the test.
  signal(SIGPIPE, SIG_IGN);
  context_ = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(context_, TLS1_2_VERSION);
  SSL_CTX_set_verify(context_, SSL_VERIFY_PEER, nullptr);
  BIO* cas = BIO_new_mem_buf(ca.data(), static_cast<int>(ca.size()));
  while (X509* certificate = PEM_read_bio_X509(cas, nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(SSL_CTX_get_cert_store(context_), certificate);
    X509_free(certificate);
  }
  BIO_free(cas);
  if (client != nullptr) {
    BIO* certificate_bio =
        BIO_new_mem_buf(client->certificate.data(), static_cast<int>(client->certificate.size()));
    X509* certificate = PEM_read_bio_X509(certificate_bio, nullptr, nullptr, nullptr);
    SSL_CTX_use_certificate(context_, certificate);
    X509_free(certificate);
    BIO_free(certificate_bio);
    BIO* key_bio = BIO_new_mem_buf(client->key.data(), static_cast<int>(client->key.size()));
    EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
    SSL_CTX_use_PrivateKey(context_, key);
    EVP_PKEY_free(key);
    BIO_free(key_bio);
  }
  ERR_clear_error();  // the end of the CA bundle reads as an error
  fd_ = ConnectWithTimeouts(port);
  if (fd_ < 0) return;
  ssl_ = SSL_new(context_);
  SSL_set_fd(ssl_, fd_);
  X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), "127.0.0.1");
  if (SSL_connect(ssl_) != 1) {
    ERR_clear_error();
    return;
  }
  connected_ = true;
  if (X509* peer = SSL_get1_peer_certificate(ssl_)) {
    server_certificate_ = Pem(peer);
    X509_free(peer);
  }
}

HttpsConnection::~HttpsConnection() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (fd_ >= 0) close(fd_);
  SSL_CTX_free(context_);
}

int HttpsConnection::Get(const std::string& path, std::string* body) {
  if (!connected_) return 0;
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  if (SSL_write(ssl_, request.data(), static_cast<int>(request.size())) !=
      static_cast<int>(request.size())) {
    ERR_clear_error();
    return 0;
  }
  // More of the answer, false once the connection ends (or 5 s pass).
  const auto read_more = [this] {
    char buffer[4096];
    const int n = SSL_read(ssl_, buffer, sizeof(buffer));
    if (n <= 0) {
      ERR_clear_error();
      return false;
    }
    buffered_.append(buffer, static_cast<size_t>(n));
    return true;
  };
  size_t end;
  while ((end = buffered_.find("\r\n\r\n")) == std::string::npos) {
    if (!read_more()) return 0;
  }
  const std::string head = absl::AsciiStrToLower(buffered_.substr(0, end + 2));
  buffered_.erase(0, end + 4);
  int status = 0;
  if (head.size() < 12 || !absl::SimpleAtoi(head.substr(9, 3), &status)) return 0;
  size_t length = 0;
  const size_t at = head.find("\r\ncontent-length:");
  if (at != std::string::npos) {
    const size_t from = at + 17;
    const std::string value = head.substr(from, head.find("\r\n", from) - from);
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &length)) return 0;
  }
  while (buffered_.size() < length) {
    if (!read_more()) return 0;
  }
  if (body != nullptr) *body = buffered_.substr(0, length);
  buffered_.erase(0, length);
  return status;
}

int HttpsGet(int port, const std::string& path, const std::string& ca, const PemPair* client,
             std::string* body) {
  HttpsConnection connection(port, ca, client);
  return connection.Get(path, body);
}

}  // namespace gecd::testing
