#ifndef GECD_TLS_OPENSSL_HANDLES_H_
#define GECD_TLS_OPENSSL_HANDLES_H_

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

// RAII owners of the OpenSSL objects gecd_tls handles (each freed by its own function), and a
// read-only memory BIO over bytes. No state: thread-safety is OpenSSL's, per object.
namespace gecd::tls {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using PrivateKey = std::unique_ptr<EVP_PKEY, PkeyFree>;

// A BIO reading `bytes`, which must outlive it.
inline Bio MemoryBio(const std::string& bytes) {
  return Bio(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

}  // namespace gecd::tls

#endif  // GECD_TLS_OPENSSL_HANDLES_H_
