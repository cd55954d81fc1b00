#include "tls/key_material.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace gecd::tls {
namespace {

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

absl::Status Bad(absl::string_view key, const std::string& path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(key, " ", path, ": ", reason));
}

Bio MemoryBio(const std::string& bytes) {
  return Bio(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

// Every certificate in a PEM bundle, in order; none when it holds no PEM certificate.
std::vector<Certificate> ReadCertificates(const std::string& pem) {
  std::vector<Certificate> certificates;
  Bio bio = MemoryBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.emplace_back(x);
  }
  ERR_clear_error();  // the end of the bundle reads as an error
  return certificates;
}

std::string TimeText(const ASN1_TIME* time) {
  Bio bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), time);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

// A password callback that declines: an encrypted key cannot be read unattended.
int NoPassword(char*, int, int, void*) { return 0; }

}  // namespace

std::vector<std::string> KeyMaterialPaths(const config::TlsSection& tls) {
  std::vector<std::string> paths = {tls.cert_file, tls.key_file};
  if (!tls.client_ca_file.empty()) paths.push_back(tls.client_ca_file);
  return paths;
}

absl::StatusOr<KeyMaterial> CheckKeyMaterial(const config::TlsSection& tls,
                                             const daemon::FilePoller::Reading& files) {
  constexpr absl::string_view kKeys[] = {"tls.cert_file", "tls.key_file", "tls.client_ca_file"};
  const std::vector<std::string> paths = KeyMaterialPaths(tls);
  if (files.size() != paths.size()) {
    return absl::InternalError("tls: a reading of the wrong number of files");
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (!files[i].ok()) {
      return absl::Status(files[i].status().code(),
                          absl::StrCat(kKeys[i], ": ", files[i].status().message()));
    }
  }
  KeyMaterial material{.certificate_chain = *files[0], .private_key = *files[1]};

  const std::vector<Certificate> chain = ReadCertificates(material.certificate_chain);
  if (chain.empty()) return Bad(kKeys[0], tls.cert_file, "no PEM certificate in it");
  X509* leaf = chain.front().get();
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) <= 0) {
    return Bad(kKeys[0], tls.cert_file,
               absl::StrCat("expired (not after ", TimeText(X509_get0_notAfter(leaf)), ")"));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
    return Bad(
        kKeys[0], tls.cert_file,
        absl::StrCat("not valid yet (not before ", TimeText(X509_get0_notBefore(leaf)), ")"));
  }
  material.not_after = TimeText(X509_get0_notAfter(leaf));

  Bio key_bio = MemoryBio(material.private_key);
  PrivateKey key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassword, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return Bad(kKeys[1], tls.key_file, "no PEM private key in it (or an encrypted one)");
  }
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return Bad(kKeys[1], tls.key_file,
               absl::StrCat("not the private key of the certificate in ", tls.cert_file));
  }

  if (!tls.client_ca_file.empty()) {
    material.client_ca = *files[2];
    if (ReadCertificates(material.client_ca).empty()) {
      return Bad(kKeys[2], tls.client_ca_file, "no PEM certificate in it");
    }
  }
  return material;
}

absl::StatusOr<KeyMaterial> LoadKeyMaterial(const config::TlsSection& tls) {
  return CheckKeyMaterial(tls, daemon::FilePoller::Read(KeyMaterialPaths(tls)));
}

}  // namespace gecd::tls
