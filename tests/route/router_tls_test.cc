// gecd route's TLS: on its listener (the tls section: OpenSSL under the relay) and to the
// endpoints (route.upstream_tls, mTLS), with certificates made at test time.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "route/fake_daemon.h"
#include "route/router.h"
#include "testing/daemon_process.h"
#include "testing/run_gecd.h"
#include "testing/scoped_temp_dir.h"
#include "tls/server_tls.h"
#include "tls/test_certificates.h"

namespace gecd::route {
namespace {

using gecd::testing::PemPair;
using gecd::testing::TestCa;
using gecd::testing::TlsHandshakes;
using gecd::testing::Trusting;
using gecd::testing::WriteTestFile;
using testing::FakeDaemon;
using ::testing::HasSubstr;

// One Correct("x") over a connection of its own (a channel with its own subchannel pool), the
// server's name checked as "localhost". The answer's text in `answer`.
grpc::Status CorrectOnce(int port, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                         std::string* answer = nullptr) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetSslTargetNameOverride("localhost");
  auto stub = v1::GrammarCorrection::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), credentials, args));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::CorrectRequest request;
  request.set_text("x");
  v1::CorrectResponse response;
  grpc::Status status = stub->Correct(&context, request, &response);
  if (answer != nullptr) *answer = response.corrected_text();
  return status;
}

// A TCP connection to 127.0.0.1:`port` that never says a word; -1 if it cannot connect.
int SilentConnection(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{.sin_family = AF_INET, .sin_port = htons(static_cast<uint16_t>(port))};
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the peer closes `fd` within `timeout` (a read sees the end).
bool ClosedWithin(int fd, std::chrono::milliseconds timeout) {
  timeval tv{.tv_sec = static_cast<time_t>(timeout.count() / 1000),
             .tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char byte;
  return read(fd, &byte, 1) == 0;
}

class RouterTlsTest : public ::testing::Test {
 protected:
  RouterTlsTest() : ca_("router CA"), clients_("client CA"), other_("another CA") {
    config_.route.listen = "127.0.0.1:0";
    config_.route.metrics_listen = "127.0.0.1:0";
    config_.route.threads = 1;
    config_.tls.cert_file = Path("router.crt");
    config_.tls.key_file = Path("router.key");
    config_.tls.refresh_s = 1;
    WritePair(ca_.Issue("router"));
  }
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  // The router's own pair (tls.cert_file, tls.key_file).
  void WritePair(const PemPair& pair) {
    WritePemPair(pair, config_.tls.cert_file, config_.tls.key_file);
  }
  void Start(const std::string& endpoint) {
    config_.route.static_endpoints = {endpoint};
    absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(config_);
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
  }
  int port() const { return router_->port(); }
  double Metric(const std::string& series) const {
    std::string metrics;
    EXPECT_EQ(gecd::testing::HttpGet(router_->metrics_port(), "/metrics", &metrics), 200);
    return gecd::testing::MetricValue(metrics, series).value_or(-1);
  }

  gecd::testing::ScopedTempDir dir_;
  TestCa ca_, clients_, other_;
  config::Config config_;
  std::unique_ptr<Router> router_;
};

TEST_F(RouterTlsTest, ServesTlsOnlyAndRefusesPlaintext) {
  FakeDaemon a("a");
  Start(a.address());
  std::string answer;
  EXPECT_TRUE(CorrectOnce(port(), Trusting(ca_), &answer).ok());
  EXPECT_EQ(answer, "a:x");
  EXPECT_EQ(CorrectOnce(port(), grpc::InsecureChannelCredentials()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // A client that trusts another CA does not accept the router.
  EXPECT_EQ(CorrectOnce(port(), Trusting(other_)).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(a.calls(), 1);
  // The router sees the failed handshakes end a moment after their clients do.
  EXPECT_TRUE(gecd::testing::WaitFor(
      [&] { return Metric("gecd_route_tls_handshakes_total{outcome=\"failed\"}") >= 2; },
      std::chrono::seconds(5)));
  EXPECT_GE(Metric("gecd_route_tls_handshakes_total{outcome=\"done\"}"), 1);
}

// TLS 1.2 at least, with forward-secret AEAD ciphers only, as gecd serve's gRPC TLS.
TEST_F(RouterTlsTest, RefusesTlsBelow12AndCiphersWithoutForwardSecrecyOrAead) {
  FakeDaemon a("a");
  Start(a.address());
  EXPECT_TRUE(TlsHandshakes(port(), TLS1_3_VERSION));
  EXPECT_TRUE(TlsHandshakes(port(), TLS1_2_VERSION));
  EXPECT_FALSE(TlsHandshakes(port(), TLS1_1_VERSION));
  EXPECT_FALSE(TlsHandshakes(port(), TLS1_VERSION));
  EXPECT_FALSE(TlsHandshakes(port(), TLS1_2_VERSION, "AES128-SHA"));  // RSA key exchange, CBC
  EXPECT_FALSE(TlsHandshakes(port(), TLS1_2_VERSION, "ECDHE-ECDSA-AES128-SHA"));  // CBC
  EXPECT_TRUE(TlsHandshakes(port(), TLS1_2_VERSION, "ECDHE-ECDSA-AES128-GCM-SHA256"));
}

TEST_F(RouterTlsTest, MutualTlsRefusesClientsWithoutACertificateOfItsCa) {
  FakeDaemon a("a");
  config_.tls.client_ca_file = Path("clients.crt");
  config_.tls.require_client_cert = true;
  WriteTestFile(config_.tls.client_ca_file, clients_.certificate());
  Start(a.address());
  const PemPair client = clients_.Issue("frontend");
  const PemPair stranger = other_.Issue("frontend");
  EXPECT_TRUE(CorrectOnce(port(), Trusting(ca_, &client)).ok());
  EXPECT_EQ(CorrectOnce(port(), Trusting(ca_)).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CorrectOnce(port(), Trusting(ca_, &stranger)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CorrectOnce(port(), grpc::InsecureChannelCredentials()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(a.calls(), 1);  // the refused clients never got a call through
}

TEST_F(RouterTlsTest, OptionalClientCertificatesAreVerifiedWhenSent) {
  FakeDaemon a("a");
  config_.tls.client_ca_file = Path("clients.crt");
  WriteTestFile(config_.tls.client_ca_file, clients_.certificate());
  Start(a.address());
  const PemPair client = clients_.Issue("frontend");
  const PemPair stranger = other_.Issue("frontend");
  EXPECT_TRUE(CorrectOnce(port(), Trusting(ca_)).ok());
  EXPECT_TRUE(CorrectOnce(port(), Trusting(ca_, &client)).ok());
  EXPECT_EQ(CorrectOnce(port(), Trusting(ca_, &stranger)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// A pod that requires client certificates (gecd serve's tls section, here gRPC's TLS through
// tls::ServerTls in a stand-in daemon) lets the router in with its client certificate
// (route.upstream_tls) and refuses everything else: a direct client without a certificate or
// with one of another CA, a router without one, a router that expects another name.
class UpstreamTlsTest : public RouterTlsTest {
 protected:
  UpstreamTlsTest() : pods_("pod CA"), routers_("router client CA") {
    config::TlsSection pod;
    pod.cert_file = Path("pod.crt");
    pod.key_file = Path("pod.key");
    pod.client_ca_file = Path("routers.crt");
    pod.require_client_cert = true;
    const PemPair pair = pods_.Issue("pod");
    WritePemPair(pair, pod.cert_file, pod.key_file);
    WriteTestFile(pod.client_ca_file, routers_.certificate());
    absl::StatusOr<std::unique_ptr<tls::ServerTls>> tls = tls::ServerTls::Create(pod);
    EXPECT_TRUE(tls.ok()) << tls.status();
    pod_tls_ = *std::move(tls);
    daemon_ = std::make_unique<FakeDaemon>("pod", pod_tls_->credentials());

    config_.tls = {};  // the router's own listener in plaintext: only its upstream side here
    config_.route.ejection_failures = 2;
    config_.route.ejection_base_ms = 100;
    config_.route.upstream_tls.ca_file = Path("pods.crt");
    config_.route.upstream_tls.cert_file = Path("router-client.crt");
    config_.route.upstream_tls.key_file = Path("router-client.key");
    config_.route.upstream_tls.refresh_s = 1;
    WriteTestFile(config_.route.upstream_tls.ca_file, pods_.certificate());
    const PemPair client = routers_.Issue("router");
    WritePemPair(client, config_.route.upstream_tls.cert_file, config_.route.upstream_tls.key_file);
  }
  ~UpstreamTlsTest() override {
    router_.reset();
    daemon_.reset();
  }
  grpc::Status Relayed(std::string* answer = nullptr) {
    return CorrectOnce(port(), grpc::InsecureChannelCredentials(), answer);
  }

  TestCa pods_, routers_;
  std::unique_ptr<tls::ServerTls> pod_tls_;
  std::unique_ptr<FakeDaemon> daemon_;
};

TEST_F(UpstreamTlsTest, ThePodLetsInTheRouterWithItsClientCertificateAndNoOneElse) {
  const int pod_port = std::stoi(daemon_->address().substr(daemon_->address().rfind(':') + 1));
  const PemPair stranger = other_.Issue("router");
  EXPECT_EQ(CorrectOnce(pod_port, Trusting(pods_)).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CorrectOnce(pod_port, Trusting(pods_, &stranger)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CorrectOnce(pod_port, grpc::InsecureChannelCredentials()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(daemon_->calls(), 0);

  Start(daemon_->address());
  std::string answer;
  const grpc::Status relayed = Relayed(&answer);
  EXPECT_TRUE(relayed.ok()) << relayed.error_message();
  EXPECT_EQ(answer, "pod:x");
  EXPECT_EQ(daemon_->calls(), 1);
}

// Ejected after UNAVAILABLE answers, the pod comes back through a health check, which must
// speak the same mTLS as the relay.
TEST_F(UpstreamTlsTest, HealthChecksOfAnEjectedPodUseTheSameTls) {
  Start(daemon_->address());
  daemon_->AnswerWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting"));
  for (int i = 0; i < 2; ++i) EXPECT_EQ(Relayed().error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(
      gecd::testing::WaitFor([&] { return Metric("gecd_route_endpoints{state=\"ejected\"}") == 1; },
                             std::chrono::seconds(5)));
  daemon_->AnswerWith(grpc::Status::OK);
  EXPECT_TRUE(gecd::testing::WaitFor([&] { return Relayed().ok(); }, std::chrono::seconds(10)));
}

TEST_F(UpstreamTlsTest, ARouterWithoutTheClientCertificateOrExpectingAnotherNameGetsNothing) {
  // No client certificate: the pod refuses the handshake, the call is UNAVAILABLE.
  config_.route.upstream_tls.cert_file = "";
  config_.route.upstream_tls.key_file = "";
  Start(daemon_->address());
  const grpc::Status without = Relayed();
  EXPECT_EQ(without.error_code(), grpc::StatusCode::UNAVAILABLE);
  router_.reset();

  // A name the pod's certificate does not carry: the router refuses the pod.
  config_.route.upstream_tls = {};
  config_.route.upstream_tls.ca_file = Path("pods.crt");
  config_.route.upstream_tls.cert_file = Path("router-client.crt");
  config_.route.upstream_tls.key_file = Path("router-client.key");
  config_.route.upstream_tls.server_name = "elsewhere.example";
  Start(daemon_->address());
  const grpc::Status misnamed = Relayed();
  EXPECT_EQ(misnamed.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(misnamed.error_message(), HasSubstr("certificate verify failed"));
  router_.reset();

  // The name it does carry, given instead of the address's host: in.
  config_.route.upstream_tls.server_name = "localhost";
  Start(daemon_->address());
  EXPECT_TRUE(Relayed().ok());
  EXPECT_EQ(daemon_->calls(), 1);
}

// TLS to a pod that speaks plaintext fails the handshake: UNAVAILABLE, saying why, and never a
// call sent in clear.
TEST_F(UpstreamTlsTest, TlsToAPlaintextPodIsUnavailable) {
  FakeDaemon plain("plain");
  Start(plain.address());
  const grpc::Status status = Relayed();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("TLS"));
  EXPECT_EQ(plain.calls(), 0);
}

// The router's client certificate rotated on disk is the one its next connection to a pod
// presents; a bad pair written after it is not taken. The pod, restarted on its port, trusts
// only the new certificate's CA: the router's old connection is gone with the old pod.
TEST_F(UpstreamTlsTest, ARotatedClientCertificateIsPresentedByTheNextConnection) {
  Start(daemon_->address());
  ASSERT_TRUE(Relayed().ok());
  const TestCa next("next router client CA");
  const PemPair rotated = next.Issue("router");
  WritePemPair(rotated, config_.route.upstream_tls.cert_file, config_.route.upstream_tls.key_file);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // two refresh periods
  // A key that is not the certificate's: kept out.
  WriteTestFile(config_.route.upstream_tls.key_file, next.Issue("other").key);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));

  const std::string address = daemon_->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  daemon_.reset();
  config::TlsSection pod;
  pod.cert_file = Path("pod.crt");
  pod.key_file = Path("pod.key");
  pod.client_ca_file = Path("next-routers.crt");
  pod.require_client_cert = true;
  WriteTestFile(pod.client_ca_file, next.certificate());
  absl::StatusOr<std::unique_ptr<tls::ServerTls>> tls = tls::ServerTls::Create(pod);
  ASSERT_TRUE(tls.ok()) << tls.status();
  pod_tls_ = *std::move(tls);
  daemon_ = std::make_unique<FakeDaemon>("restarted", pod_tls_->credentials(), port);
  ASSERT_EQ(daemon_->address(), address);
  // The first call may still meet the old connection's end (UNAVAILABLE, retried once).
  std::string answer;
  EXPECT_TRUE(
      gecd::testing::WaitFor([&] { return Relayed(&answer).ok(); }, std::chrono::seconds(10)));
  EXPECT_EQ(answer, "restarted:x");
}

// A pair rotated on disk serves the next connection while connections keep coming and calls
// keep flowing on an open one: no call fails. A bad pair after it is logged and not taken.
TEST_F(RouterTlsTest, ARotatedCertificateServesTheNextConnectionAndNoCallFails) {
  FakeDaemon a("a");
  Start(a.address());
  const TestCa next("next router CA");
  // Clients that trust both CAs (as during a CA rollover) on new connections, and one open
  // connection that trusts only the old one.
  grpc::SslCredentialsOptions both;
  both.pem_root_certs = ca_.certificate() + next.certificate();
  const auto trust_both = grpc::SslCredentials(both);
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  auto open = v1::GrammarCorrection::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port()), Trusting(ca_), args));
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0}, failed{0};
  std::thread load([&] {
    while (!stop.load()) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      v1::CorrectRequest request;
      request.set_text("x");
      v1::CorrectResponse response;
      const bool ok =
          open->Correct(&context, request, &response).ok() && CorrectOnce(port(), trust_both).ok();
      ++calls;
      if (!ok) ++failed;
    }
  });
  WritePair(next.Issue("router"));
  EXPECT_TRUE(gecd::testing::WaitFor([&] { return CorrectOnce(port(), Trusting(next)).ok(); },
                                     std::chrono::seconds(10)));
  EXPECT_EQ(CorrectOnce(port(), Trusting(ca_)).error_code(), grpc::StatusCode::UNAVAILABLE);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop.store(true);
  load.join();
  EXPECT_GT(calls.load(), 5);
  EXPECT_EQ(failed.load(), 0);

  // A key that is not the certificate's, then a certificate file that is not PEM: both kept
  // out, and the pair in use still serves new connections.
  const PemPair b1 = next.Issue("b1");
  const PemPair b2 = next.Issue("b2");
  WritePair({b1.certificate, b2.key});
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // two refresh periods
  EXPECT_TRUE(CorrectOnce(port(), Trusting(next)).ok());
  WriteTestFile(config_.tls.cert_file, "garbage");
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_TRUE(CorrectOnce(port(), Trusting(next)).ok());
  // And a good pair after the bad ones is taken.
  WritePair(ca_.Issue("router"));
  EXPECT_TRUE(gecd::testing::WaitFor([&] { return CorrectOnce(port(), Trusting(ca_)).ok(); },
                                     std::chrono::seconds(10)));
}

// A flood of connections that never finish their handshake holds at most
// route.max_tls_handshakes of them, each for route.tls_handshake_timeout_ms; the rest are
// closed at once, and clients get in again once the flood's connections are cut off.
TEST_F(RouterTlsTest, HandshakesAreBoundedInNumberAndTime) {
  FakeDaemon a("a");
  config_.route.max_tls_handshakes = 2;
  config_.route.tls_handshake_timeout_ms = 1000;
  Start(a.address());
  const int slow1 = SilentConnection(port());
  const int slow2 = SilentConnection(port());
  ASSERT_GE(slow1, 0);
  ASSERT_GE(slow2, 0);
  ASSERT_TRUE(gecd::testing::WaitFor(
      [&] {
        // A third connection is closed at once while both are held.
        const int third = SilentConnection(port());
        const bool closed = ClosedWithin(third, std::chrono::milliseconds(200));
        close(third);
        return closed;
      },
      std::chrono::seconds(5)));
  EXPECT_GE(Metric("gecd_route_tls_handshakes_total{outcome=\"refused\"}"), 1);
  // The silent ones are cut off after the timeout; then a client gets in.
  EXPECT_TRUE(ClosedWithin(slow1, std::chrono::seconds(3)));
  EXPECT_TRUE(ClosedWithin(slow2, std::chrono::seconds(3)));
  close(slow1);
  close(slow2);
  EXPECT_EQ(Metric("gecd_route_tls_handshakes_total{outcome=\"timed_out\"}"), 2);
  EXPECT_TRUE(CorrectOnce(port(), Trusting(ca_)).ok());
}

// Bad files stop the start with an error naming the key, the file and the reason; `gecd route`
// exits 2 with it.
TEST_F(RouterTlsTest, BadFilesAreStartUpErrorsNamingTheFile) {
  FakeDaemon a("a");
  config_.route.static_endpoints = {a.address()};
  const auto error = [&] {
    absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(config_);
    return router.ok() ? std::string("started") : std::string(router.status().message());
  };
  WriteTestFile(config_.tls.key_file, "not a key");
  EXPECT_THAT(error(), HasSubstr(absl::StrCat("tls.key_file ", config_.tls.key_file,
                                              ": no PEM private key")));
  WritePair(ca_.Issue("router"));

  config_.route.upstream_tls.ca_file = Path("missing.crt");
  EXPECT_THAT(error(), HasSubstr("route.upstream_tls.ca_file"));
  EXPECT_THAT(error(), HasSubstr(Path("missing.crt")));
  config_.route.upstream_tls.ca_file = Path("pods.crt");
  WriteTestFile(config_.route.upstream_tls.ca_file, "-----BEGIN CERTIFICATE-----\nnope\n");
  EXPECT_THAT(error(), HasSubstr(absl::StrCat("route.upstream_tls.ca_file ", Path("pods.crt"),
                                              ": no PEM certificate")));
  WriteTestFile(config_.route.upstream_tls.ca_file, other_.certificate());
  config_.route.upstream_tls.cert_file = Path("client.crt");
  config_.route.upstream_tls.key_file = Path("client.key");
  const PemPair expired = other_.Issue("router", -7200, -3600);
  WritePemPair(expired, config_.route.upstream_tls.cert_file, config_.route.upstream_tls.key_file);
  EXPECT_THAT(error(), HasSubstr(absl::StrCat("route.upstream_tls.cert_file ", Path("client.crt"),
                                              ": expired")));
  const PemPair one = other_.Issue("one");
  const PemPair two = other_.Issue("two");
  WriteTestFile(config_.route.upstream_tls.cert_file, one.certificate);
  WriteTestFile(config_.route.upstream_tls.key_file, two.key);
  EXPECT_THAT(error(), HasSubstr(absl::StrCat("route.upstream_tls.key_file ", Path("client.key"),
                                              ": not the private key of the certificate")));
  WriteTestFile(config_.route.upstream_tls.key_file, one.key);
  EXPECT_EQ(error(), "started");

  // The binary: exit 2 and the sentence.
  WriteTestFile(config_.tls.cert_file, "garbage");
  const gecd::testing::RunResult run = gecd::testing::RunGecd(absl::StrCat(
      "route --set route.listen=127.0.0.1:0 --set route.metrics_listen=127.0.0.1:0",
      " --set tls.cert_file=", config_.tls.cert_file, " --set tls.key_file=", config_.tls.key_file,
      " --set route.endpoints.static=", a.address()));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr(absl::StrCat("tls.cert_file ", config_.tls.cert_file,
                                                 ": no PEM certificate")));
}

// route.metrics_listen with the metrics_tls section: HTTPS, client certificates required here,
// and a bad file stops the router with exit 2 naming it.
TEST_F(RouterTlsTest, MetricsListenerServesHttpsWithMetricsTls) {
  FakeDaemon a("a");
  const PemPair metrics = ca_.Issue("router metrics");
  config_.metrics_tls.cert_file = Path("metrics.crt");
  config_.metrics_tls.key_file = Path("metrics.key");
  config_.metrics_tls.client_ca_file = Path("clients.crt");
  config_.metrics_tls.require_client_cert = true;
  WritePemPair(metrics, config_.metrics_tls.cert_file, config_.metrics_tls.key_file);
  WriteTestFile(config_.metrics_tls.client_ca_file, clients_.certificate());
  Start(a.address());
  const PemPair prometheus = clients_.Issue("prometheus");
  std::string body;
  EXPECT_EQ(gecd::testing::HttpsGet(router_->metrics_port(), "/metrics", ca_.certificate(),
                                    &prometheus, &body),
            200);
  EXPECT_THAT(body, HasSubstr("gecd_route_"));
  EXPECT_EQ(gecd::testing::HttpsGet(router_->metrics_port(), "/healthz", ca_.certificate()), 403);
  EXPECT_EQ(gecd::testing::HttpGet(router_->metrics_port(), "/healthz"), 0);

  WriteTestFile(config_.metrics_tls.key_file, ca_.Issue("another").key);
  const gecd::testing::RunResult run = gecd::testing::RunGecd(
      absl::StrCat("route --set route.listen=127.0.0.1:0 --set route.metrics_listen=127.0.0.1:0",
                   " --set metrics_tls.cert_file=", config_.metrics_tls.cert_file,
                   " --set metrics_tls.key_file=", config_.metrics_tls.key_file,
                   " --set route.endpoints.static=", a.address()));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr(absl::StrCat("metrics_tls.key_file ", config_.metrics_tls.key_file,
                                     ": not the private key of the certificate")));
}

}  // namespace
}  // namespace gecd::route
