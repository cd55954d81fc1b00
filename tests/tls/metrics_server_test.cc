// The metrics listener with the metrics_tls section: the files checked at start (each bad one
// named with its key and reason), HTTPS on the first pair, and the files followed as they
// rotate: a new pair serves new connections while an open one keeps working, a bad one is
// logged and the pair in use kept.
#include "tls/metrics_server.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/scoped_temp_dir.h"
#include "tls/test_certificates.h"

namespace gecd::tls {
namespace {

using ::testing::HasSubstr;
using testing::HttpsConnection;
using testing::HttpsGet;
using testing::PemPair;
using testing::TestCa;
using testing::WriteTestFile;

class MetricsServerTest : public ::testing::Test {
 protected:
  MetricsServerTest() : ca_("metrics CA"), clients_("client CA") {
    tls_.cert_file = Path("metrics.crt");
    tls_.key_file = Path("metrics.key");
    tls_.refresh_s = 1;
  }
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  void Write(const PemPair& pair) { WritePemPair(pair, tls_.cert_file, tls_.key_file); }
  absl::StatusOr<std::unique_ptr<MetricsServer>> Start() {
    return MetricsServer::Start(
        "server.metrics_listen", "127.0.0.1:0",
        {.metrics = [] { return std::string("x 1\n"); }, .ready = [] { return true; }}, tls_);
  }
  // Why Start fails ("started" when it does not).
  std::string Error() {
    absl::StatusOr<std::unique_ptr<MetricsServer>> server = Start();
    return server.ok() ? "started" : std::string(server.status().message());
  }

  testing::ScopedTempDir dir_;
  TestCa ca_, clients_;
  config::TlsSection tls_;
};

TEST_F(MetricsServerTest, PlainHttpWithoutACertificate) {
  tls_ = {};
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = Start();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE((*server)->https());
  EXPECT_EQ(testing::HttpGet((*server)->port(), "/healthz"), 200);
}

TEST_F(MetricsServerTest, BadFilesAtStartNameTheKeyTheFileAndTheReason) {
  EXPECT_THAT(Error(), HasSubstr("metrics_tls.cert_file: cannot open " + tls_.cert_file));
  WriteTestFile(tls_.cert_file, "not a certificate\n");
  WriteTestFile(tls_.key_file, "nor a key\n");
  EXPECT_THAT(Error(),
              HasSubstr("metrics_tls.cert_file " + tls_.cert_file + ": no PEM certificate in it"));
  const PemPair expired = ca_.Issue("gecd", -7200, -3600);
  Write(expired);
  EXPECT_THAT(Error(), HasSubstr("metrics_tls.cert_file " + tls_.cert_file + ": expired"));
  const PemPair one = ca_.Issue("one"), two = ca_.Issue("two");
  WriteTestFile(tls_.cert_file, one.certificate);
  WriteTestFile(tls_.key_file, two.key);
  EXPECT_THAT(Error(), HasSubstr("metrics_tls.key_file " + tls_.key_file +
                                 ": not the private key of the certificate"));
  WriteTestFile(tls_.key_file, one.key);
  tls_.client_ca_file = Path("clients.crt");
  WriteTestFile(tls_.client_ca_file, "-----BEGIN CERTIFICATE-----\nnope\n");
  EXPECT_THAT(Error(), HasSubstr("metrics_tls.client_ca_file " + tls_.client_ca_file +
                                 ": no PEM certificate in it"));
  WriteTestFile(tls_.client_ca_file, clients_.certificate());
  EXPECT_EQ(Error(), "started");
}

TEST_F(MetricsServerTest, ATakenPortNamesTheListenKey) {
  Write(ca_.Issue("gecd"));
  testing::HeldTcpPort held;
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(
      "route.metrics_listen", absl::StrCat("127.0.0.1:", held.port()),
      {.metrics = [] { return std::string(); }, .ready = [] { return true; }}, tls_);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("route.metrics_listen"));
}

TEST_F(MetricsServerTest, RequiresClientCertificatesFromTheClientCa) {
  Write(ca_.Issue("gecd"));
  tls_.client_ca_file = Path("clients.crt");
  tls_.require_client_cert = true;
  WriteTestFile(tls_.client_ca_file, clients_.certificate());
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = Start();
  ASSERT_TRUE(server.ok()) << server.status();
  const PemPair prometheus = clients_.Issue("prometheus");
  const PemPair stranger = TestCa("another CA").Issue("prometheus");
  EXPECT_EQ(HttpsGet((*server)->port(), "/metrics", ca_.certificate(), &prometheus), 200);
  EXPECT_EQ(HttpsGet((*server)->port(), "/metrics", ca_.certificate()), 403);
  EXPECT_EQ(HttpsGet((*server)->port(), "/metrics", ca_.certificate(), &stranger), 403);
}

// cert-manager replaces the files: after the next read, a new connection gets the new
// certificate while a keep-alive connection opened before is still served. A bad new pair is
// logged and the pair in use kept.
TEST_F(MetricsServerTest, FollowsTheFilesAndKeepsThePairInUseWhenTheNewOneIsBad) {
  const PemPair first = ca_.Issue("gecd");
  Write(first);
  absl::StatusOr<std::unique_ptr<MetricsServer>> started = Start();
  ASSERT_TRUE(started.ok()) << started.status();
  const MetricsServer& server = **started;
  EXPECT_TRUE(server.https());
  HttpsConnection before(server.port(), ca_.certificate());
  ASSERT_EQ(before.Get("/healthz"), 200);
  EXPECT_EQ(before.server_certificate(), first.certificate);

  const PemPair second = ca_.Issue("gecd");
  Write(second);
  const auto served = [&] {
    return HttpsConnection(server.port(), ca_.certificate()).server_certificate();
  };
  EXPECT_TRUE(
      testing::WaitFor([&] { return served() == second.certificate; }, std::chrono::seconds(10)));
  std::string body;
  EXPECT_EQ(before.Get("/metrics", &body), 200);
  EXPECT_EQ(body, "x 1\n");

  // A key that is not the certificate's: the second pair stays.
  const PemPair third = ca_.Issue("gecd"), fourth = ca_.Issue("gecd");
  WriteTestFile(tls_.cert_file, third.certificate);
  WriteTestFile(tls_.key_file, fourth.key);
  std::this_thread::sleep_for(std::chrono::milliseconds(2'500));  // two reads and more
  EXPECT_EQ(served(), second.certificate);
  EXPECT_EQ(HttpsGet(server.port(), "/healthz", ca_.certificate()), 200);
  // An unreadable file, likewise.
  std::filesystem::remove(tls_.key_file);
  std::this_thread::sleep_for(std::chrono::milliseconds(2'500));
  EXPECT_EQ(served(), second.certificate);
  // And a good pair again is taken.
  Write(third);
  EXPECT_TRUE(
      testing::WaitFor([&] { return served() == third.certificate; }, std::chrono::seconds(10)));
}

}  // namespace
}  // namespace gecd::tls
