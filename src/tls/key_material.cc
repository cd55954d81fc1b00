#include "tls/key_material.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tls/openssl_handles.h"

namespace gecd::tls {
namespace {

absl::Status Bad(absl::string_view key, const std::string& path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(key, " ", path, ": ", reason));
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

std::vector<std::string> KeyMaterialFiles::Paths() const {
  std::vector<std::string> paths;
  for (const std::string* path : {&cert_file, &key_file, &ca_file}) {
    if (!path->empty()) paths.push_back(*path);
  }
  return paths;
}

KeyMaterialFiles ServerFiles(const config::TlsSection& tls, absl::string_view section) {
  return {.cert_key = absl::StrCat(section, ".cert_file"),
          .cert_file = tls.cert_file,
          .key_key = absl::StrCat(section, ".key_file"),
          .key_file = tls.key_file,
          .ca_key = absl::StrCat(section, ".client_ca_file"),
          .ca_file = tls.client_ca_file};
}

KeyMaterialFiles UpstreamFiles(const config::UpstreamTlsSection& upstream) {
  return {.cert_key = "route.upstream_tls.cert_file",
          .cert_file = upstream.cert_file,
          .key_key = "route.upstream_tls.key_file",
          .key_file = upstream.key_file,
          .ca_key = "route.upstream_tls.ca_file",
          .ca_file = upstream.ca_file};
}

absl::StatusOr<KeyMaterial> CheckKeyMaterial(const KeyMaterialFiles& files,
                                             const daemon::FilePoller::Reading& reading) {
  // The reading of each file set, in Paths()' order.
  std::vector<const std::string*> keys;
  for (const auto& [key, path] :
       {std::pair(&files.cert_key, &files.cert_file), std::pair(&files.key_key, &files.key_file),
        std::pair(&files.ca_key, &files.ca_file)}) {
    if (!path->empty()) keys.push_back(key);
  }
  if (reading.size() != keys.size()) {
    return absl::InternalError("tls: a reading of the wrong number of files");
  }
  for (size_t i = 0; i < reading.size(); ++i) {
    if (!reading[i].ok()) {
      return absl::Status(reading[i].status().code(),
                          absl::StrCat(*keys[i], ": ", reading[i].status().message()));
    }
  }
  KeyMaterial material;
  size_t next = 0;
  if (!files.cert_file.empty()) {
    material.certificate_chain = *reading[next++];
    material.private_key = *reading[next++];
    const std::vector<Certificate> chain = ReadCertificates(material.certificate_chain);
    if (chain.empty()) return Bad(files.cert_key, files.cert_file, "no PEM certificate in it");
    X509* leaf = chain.front().get();
    if (X509_cmp_current_time(X509_get0_notAfter(leaf)) <= 0) {
      return Bad(files.cert_key, files.cert_file,
                 absl::StrCat("expired (not after ", TimeText(X509_get0_notAfter(leaf)), ")"));
    }
    if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
      return Bad(
          files.cert_key, files.cert_file,
          absl::StrCat("not valid yet (not before ", TimeText(X509_get0_notBefore(leaf)), ")"));
    }
    material.not_after = TimeText(X509_get0_notAfter(leaf));

    Bio key_bio = MemoryBio(material.private_key);
    PrivateKey key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassword, nullptr));
    ERR_clear_error();
    if (key == nullptr) {
      return Bad(files.key_key, files.key_file, "no PEM private key in it (or an encrypted one)");
    }
    if (X509_check_private_key(leaf, key.get()) != 1) {
      ERR_clear_error();
      return Bad(files.key_key, files.key_file,
                 absl::StrCat("not the private key of the certificate in ", files.cert_file));
    }
  }
  if (!files.ca_file.empty()) {
    material.ca = *reading[next++];
    if (ReadCertificates(material.ca).empty()) {
      return Bad(files.ca_key, files.ca_file, "no PEM certificate in it");
    }
  }
  return material;
}

absl::StatusOr<KeyMaterial> LoadKeyMaterial(const KeyMaterialFiles& files) {
  return CheckKeyMaterial(files, daemon::FilePoller::Read(files.Paths()));
}

}  // namespace gecd::tls
