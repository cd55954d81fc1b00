#include "tls/upstream_tls.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scoped_temp_dir.h"
#include "tls/listener_tls.h"
#include "tls/test_certificates.h"

// The OpenSSL contexts that follow their files (route.upstream_tls, and the router's tls
// section): a good new set replaces the context new connections take, a bad one leaves the one
// in use. The relay's use of them is tested in tests/route/router_tls_test.cc.
namespace gecd::tls {
namespace {

using ::testing::HasSubstr;
using testing::PemPair;
using testing::TestCa;
using testing::WriteTestFile;

// Whether `context()` stops returning `old` within 10 s (a rotation is read every second).
template <typename Tls>
bool Replaces(const Tls& tls, const SslContext& old) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (tls.context() != old) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class UpstreamTlsTest : public ::testing::Test {
 protected:
  UpstreamTlsTest() : ca_("pod CA"), clients_("router client CA") {
    upstream_.ca_file = dir_.path() + "/ca.crt";
    upstream_.cert_file = dir_.path() + "/client.crt";
    upstream_.key_file = dir_.path() + "/client.key";
    upstream_.refresh_s = 1;
    WriteTestFile(upstream_.ca_file, ca_.certificate());
    Write(clients_.Issue("router"));
  }
  void Write(const PemPair& pair) { WritePemPair(pair, upstream_.cert_file, upstream_.key_file); }
  // Two refresh periods: a change has been read by then.
  static void Settle() { std::this_thread::sleep_for(std::chrono::milliseconds(2500)); }

  gecd::testing::ScopedTempDir dir_;
  TestCa ca_, clients_;
  config::UpstreamTlsSection upstream_;
};

TEST_F(UpstreamTlsTest, ARotatedPairReplacesTheContextAndABadOneIsNotTaken) {
  absl::StatusOr<std::unique_ptr<UpstreamTls>> tls = UpstreamTls::Create(upstream_);
  ASSERT_TRUE(tls.ok()) << tls.status();
  ASSERT_NE((*tls)->credentials(), nullptr);
  const SslContext first = (*tls)->context();
  ASSERT_NE(first, nullptr);
  EXPECT_NE(SSL_CTX_get0_certificate(first.get()), nullptr);  // the client certificate

  const PemPair a = clients_.Issue("a");
  const PemPair b = clients_.Issue("b");
  Write({a.certificate, b.key});  // a key that is not the certificate's
  Settle();
  EXPECT_EQ((*tls)->context(), first);
  WriteTestFile(upstream_.ca_file, "not PEM");
  Settle();
  EXPECT_EQ((*tls)->context(), first);

  WriteTestFile(upstream_.ca_file, ca_.certificate());
  Write(a);
  EXPECT_TRUE(Replaces(**tls, first));
}

TEST_F(UpstreamTlsTest, TheNameIsTheServerNameElseTheHost) {
  absl::StatusOr<std::unique_ptr<UpstreamTls>> tls = UpstreamTls::Create(upstream_);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ((*tls)->PeerName("10.0.0.7"), "10.0.0.7");
  upstream_.server_name = "gecd.gecd.svc";
  tls = UpstreamTls::Create(upstream_);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ((*tls)->PeerName("10.0.0.7"), "gecd.gecd.svc");
}

TEST_F(UpstreamTlsTest, WithoutAClientCertificateOnlyTheCasAreNeeded) {
  upstream_.cert_file = "";
  upstream_.key_file = "";
  absl::StatusOr<std::unique_ptr<UpstreamTls>> tls = UpstreamTls::Create(upstream_);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(SSL_CTX_get0_certificate((*tls)->context().get()), nullptr);
  upstream_.ca_file = dir_.path() + "/missing.crt";
  tls = UpstreamTls::Create(upstream_);
  ASSERT_FALSE(tls.ok());
  EXPECT_THAT(tls.status().message(), HasSubstr("route.upstream_tls.ca_file: "));
  EXPECT_THAT(tls.status().message(), HasSubstr(upstream_.ca_file));
}

TEST(ListenerTlsTest, ARotatedPairReplacesTheContextAndABadOneIsNotTaken) {
  gecd::testing::ScopedTempDir dir;
  const TestCa ca("router CA");
  config::TlsSection tls;
  tls.cert_file = dir.path() + "/tls.crt";
  tls.key_file = dir.path() + "/tls.key";
  tls.refresh_s = 1;
  const PemPair first_pair = ca.Issue("router");
  WritePemPair(first_pair, tls.cert_file, tls.key_file);
  absl::StatusOr<std::unique_ptr<ListenerTls>> listener = ListenerTls::Create(tls);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const SslContext first = (*listener)->context();
  WriteTestFile(tls.key_file, ca.Issue("other").key);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ((*listener)->context(), first);
  const PemPair next = ca.Issue("router");
  WritePemPair(next, tls.cert_file, tls.key_file);
  EXPECT_TRUE(Replaces(**listener, first));
}

}  // namespace
}  // namespace gecd::tls
