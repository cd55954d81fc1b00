#include "tls/test_certificates.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

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

}  // namespace gecd::testing
