#include "tls/key_material.h"

#include <sys/stat.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scoped_temp_dir.h"
#include "tls/test_certificates.h"

namespace gecd::tls {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::PemPair;
using testing::TestCa;
using testing::WriteTestFile;

class KeyMaterialTest : public ::testing::Test {
 protected:
  KeyMaterialTest() : ca_("test CA") {
    tls_.cert_file = dir_.path() + "/server.crt";
    tls_.key_file = dir_.path() + "/server.key";
    tls_.client_ca_file = dir_.path() + "/clients.crt";
    Write(ca_.Issue("server"));
    WriteTestFile(tls_.client_ca_file, ca_.certificate());
  }
  void Write(const PemPair& pair) { WritePemPair(pair, tls_.cert_file, tls_.key_file); }
  std::string Error() {
    absl::StatusOr<KeyMaterial> material = LoadKeyMaterial(tls_);
    return material.ok() ? "ok" : std::string(material.status().message());
  }

  gecd::testing::ScopedTempDir dir_;
  TestCa ca_;
  config::TlsSection tls_;
};

TEST_F(KeyMaterialTest, AGoodPairLoads) {
  absl::StatusOr<KeyMaterial> material = LoadKeyMaterial(tls_);
  ASSERT_TRUE(material.ok()) << material.status();
  EXPECT_THAT(material->certificate_chain, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_THAT(material->private_key, HasSubstr("PRIVATE KEY"));
  EXPECT_EQ(material->ca, ca_.certificate());
  EXPECT_THAT(material->not_after, HasSubstr("GMT"));
  tls_.client_ca_file = "";
  material = LoadKeyMaterial(tls_);
  ASSERT_TRUE(material.ok()) << material.status();
  EXPECT_EQ(material->ca, "");
}

TEST_F(KeyMaterialTest, MissingFilesAreNamed) {
  const std::string missing = dir_.path() + "/nowhere.crt";
  tls_.cert_file = missing;
  EXPECT_THAT(Error(),
              AllOf(HasSubstr("tls.cert_file"), HasSubstr(missing), HasSubstr("No such file")));
  tls_.cert_file = dir_.path() + "/server.crt";
  tls_.client_ca_file = missing;
  EXPECT_THAT(Error(), AllOf(HasSubstr("tls.client_ca_file"), HasSubstr(missing)));
}

TEST_F(KeyMaterialTest, UnreadableFileIsNamed) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads a file whatever its mode";
  ASSERT_EQ(chmod(tls_.key_file.c_str(), 0), 0);
  EXPECT_THAT(Error(), AllOf(HasSubstr("tls.key_file"), HasSubstr(tls_.key_file),
                             HasSubstr("Permission denied")));
}

TEST_F(KeyMaterialTest, NonPemFilesAreNamed) {
  WriteTestFile(tls_.cert_file, "not a certificate\n");
  EXPECT_THAT(Error(), AllOf(HasSubstr("tls.cert_file"), HasSubstr(tls_.cert_file),
                             HasSubstr("no PEM certificate")));
  Write(ca_.Issue("server"));
  WriteTestFile(tls_.key_file, "-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n");
  EXPECT_THAT(Error(), AllOf(HasSubstr("tls.key_file"), HasSubstr(tls_.key_file),
                             HasSubstr("no PEM private key")));
  Write(ca_.Issue("server"));
  WriteTestFile(tls_.client_ca_file, "");
  EXPECT_THAT(Error(), AllOf(HasSubstr("tls.client_ca_file"), HasSubstr("no PEM certificate")));
}

TEST_F(KeyMaterialTest, ExpiredAndNotYetValidAreRefused) {
  Write(ca_.Issue("server", -7200, -3600));
  EXPECT_THAT(Error(), AllOf(HasSubstr("tls.cert_file"), HasSubstr("expired")));
  Write(ca_.Issue("server", 3600, 7200));
  EXPECT_THAT(Error(), AllOf(HasSubstr("tls.cert_file"), HasSubstr("not valid yet")));
}

TEST_F(KeyMaterialTest, AKeyOfAnotherCertificateIsRefused) {
  const PemPair a = ca_.Issue("a");
  const PemPair b = ca_.Issue("b");
  Write({a.certificate, b.key});
  EXPECT_THAT(Error(), AllOf(HasSubstr("tls.key_file"), HasSubstr(tls_.key_file),
                             HasSubstr("not the private key of the certificate in"),
                             HasSubstr(tls_.cert_file)));
}

}  // namespace
}  // namespace gecd::tls
