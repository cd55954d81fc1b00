// The operator endpoint as a probe sees it: the answers of /healthz, /readyz and /metrics, a
// taken port, and probes that still answer promptly while many idle and slow (slowloris)
// connections are open, as a kubelet must see them or it kills the pod. Over HTTPS too (the
// metrics_tls section): gecd's TLS policy, client certificates, and a certificate replaced
// while connections are open.
#include "daemon/status_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/open_file_limit.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "tls/test_certificates.h"

namespace gecd::daemon {
namespace {

using gecd::testing::HttpGet;
using gecd::testing::HttpsConnection;
using gecd::testing::HttpsGet;
using gecd::testing::PemPair;
using gecd::testing::TestCa;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::unique_ptr<StatusHttpServer> StartOrDie(std::atomic<bool>* ready,
                                             const std::string& listen = "127.0.0.1:0") {
  StatusHttpServer::Handlers handlers;
  handlers.metrics = [] { return std::string("# HELP x y\n# TYPE x counter\nx 1\n"); };
  handlers.ready = [ready] { return ready->load(); };
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> server =
      StatusHttpServer::Start(listen, std::move(handlers));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// A non-blocking TCP connection to 127.0.0.1:`port`, connect() started (-1 on failure).
int StartConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether every fd in `fds` finishes connecting within `timeout`.
bool AllConnected(const std::vector<int>& fds, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (const int fd : fds) {
    pollfd p{fd, POLLOUT, 0};
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (poll(&p, 1, std::max<int>(0, static_cast<int>(left.count()))) != 1) return false;
    int error = 0;
    socklen_t len = sizeof(error);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) return false;
  }
  return true;
}

// How many of `fds` the server has closed (readable at once: EOF or a reset).
int ClosedByServer(const std::vector<int>& fds) {
  int closed = 0;
  for (const int fd : fds) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) == 1) ++closed;
  }
  return closed;
}

TEST(StatusHttpServerTest, AnswersHealthReadinessAndMetrics) {
  std::atomic<bool> ready{true};
  std::unique_ptr<StatusHttpServer> server = StartOrDie(&ready);
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->port(), 0);
  std::string body;
  EXPECT_EQ(HttpGet(server->port(), "/healthz", &body), 200);
  EXPECT_EQ(body, "ok\n");
  EXPECT_EQ(HttpGet(server->port(), "/readyz", &body), 200);
  EXPECT_EQ(body, "ready\n");
  EXPECT_EQ(HttpGet(server->port(), "/metrics", &body), 200);
  EXPECT_EQ(body, "# HELP x y\n# TYPE x counter\nx 1\n");
  EXPECT_EQ(HttpGet(server->port(), "/nothing", &body), 404);

  ready = false;
  EXPECT_EQ(HttpGet(server->port(), "/readyz", &body), 503);
  EXPECT_EQ(body, "not ready\n");
  EXPECT_EQ(HttpGet(server->port(), "/healthz", &body), 200);  // alive while not ready
}

// Sends `requests` on one connection and reads what comes back until the server closes it.
std::string Exchange(int port, const std::string& requests) {
  const int fd = StartConnect(port);
  if (!AllConnected({fd}, milliseconds(5'000))) return "";
  std::string response;
  if (send(fd, requests.data(), requests.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(requests.size())) {
    char buf[4096];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 5'000) != 1) break;
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      response.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return response;
}

TEST(StatusHttpServerTest, MetricsCarryThePrometheusContentType) {
  std::atomic<bool> ready{true};
  std::unique_ptr<StatusHttpServer> server = StartOrDie(&ready);
  ASSERT_NE(server, nullptr);
  const std::string response =
      Exchange(server->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(absl::StrContains(absl::AsciiStrToLower(response),
                                "content-type: text/plain; version=0.0.4; charset=utf-8\r\n"))
      << response;
}

// A scraper's keep-alive connection serves its next request too.
TEST(StatusHttpServerTest, KeepsTheConnectionForTheNextRequest) {
  std::atomic<bool> ready{false};
  std::unique_ptr<StatusHttpServer> server = StartOrDie(&ready);
  ASSERT_NE(server, nullptr);
  const std::string response =
      Exchange(server->port(),
               "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
               "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 200 ")) << response;
  EXPECT_TRUE(absl::StrContains(response, "\r\n\r\nok\nHTTP/1.1 503 ")) << response;
  EXPECT_TRUE(absl::EndsWith(response, "not ready\n")) << response;
}

// A body no path takes is dropped, and the request still answered.
TEST(StatusHttpServerTest, AnswersAGetWithABody) {
  std::atomic<bool> ready{true};
  std::unique_ptr<StatusHttpServer> server = StartOrDie(&ready);
  ASSERT_NE(server, nullptr);
  const std::string response =
      Exchange(server->port(),
               "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
               "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 200 ")) << response;
  EXPECT_TRUE(absl::StrContains(response, "\r\n\r\nok\nHTTP/1.1 200 ")) << response;
  EXPECT_TRUE(absl::EndsWith(response, "\r\n\r\nready\n")) << response;
}

TEST(StatusHttpServerTest, OtherMethodsGet405) {
  std::atomic<bool> ready{true};
  std::unique_ptr<StatusHttpServer> server = StartOrDie(&ready);
  ASSERT_NE(server, nullptr);
  const std::string response = Exchange(
      server->port(), "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 405 ")) << response;
  EXPECT_TRUE(absl::StrContains(response, "Allow: GET, HEAD\r\n")) << response;
}

TEST(StatusHttpServerTest, ServesIpv6Loopback) {
  StatusHttpServer::Handlers handlers;
  handlers.metrics = [] { return std::string(); };
  handlers.ready = [] { return true; };
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> server =
      StatusHttpServer::Start("[::1]:0", std::move(handlers));
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << server.status();
  const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  addr.sin6_port = htons(static_cast<uint16_t>((*server)->port()));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
}

TEST(StatusHttpServerTest, TakenPortIsAnError) {
  gecd::testing::HeldTcpPort held;
  StatusHttpServer::Handlers handlers;
  handlers.metrics = [] { return std::string(); };
  handlers.ready = [] { return true; };
  const std::string listen = absl::StrCat("127.0.0.1:", held.port());
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> server =
      StatusHttpServer::Start(listen, std::move(handlers));
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(absl::StrContains(server.status().message(), listen)) << server.status();
}

TEST(StatusHttpServerTest, BadAddressNamesTheKey) {
  StatusHttpServer::Handlers handlers;
  handlers.metrics = [] { return std::string(); };
  handlers.ready = [] { return true; };
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> server =
      StatusHttpServer::Start("127.0.0.1", std::move(handlers));
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(absl::StrContains(server.status().message(), "server.metrics_listen"))
      << server.status();
}

// Issue 12: a thread-per-connection server stopped answering probes with 8 idle connections
// open (16: 5.5 s). The bound here is generous for a shared two-core box; the goal is 100 ms.
TEST(StatusHttpServerTest, ProbesAnswerWithAThousandIdleAndSlowConnectionsOpen) {
  constexpr int kIdle = 1'000;
  constexpr int kSlow = 50;
  constexpr milliseconds kProbeBound(1'000);
  ASSERT_TRUE(RaiseOpenFileLimit().ok());
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur < 2 * (kIdle + kSlow) + 100) {
    GTEST_SKIP() << "RLIMIT_NOFILE " << limit.rlim_cur << " is too low for this test";
  }
  std::atomic<bool> ready{true};
  std::unique_ptr<StatusHttpServer> server = StartOrDie(&ready);
  ASSERT_NE(server, nullptr);

  std::vector<int> idle, slow;
  for (int i = 0; i < kIdle; ++i) idle.push_back(StartConnect(server->port()));
  for (int i = 0; i < kSlow; ++i) slow.push_back(StartConnect(server->port()));
  ASSERT_TRUE(AllConnected(idle, milliseconds(10'000)));  // a short listen backlog fails here
  ASSERT_TRUE(AllConnected(slow, milliseconds(10'000)));
  // Slowloris: a request line, then one header byte every 500 ms, never a blank line.
  for (const int fd : slow) {
    const std::string start = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    ASSERT_EQ(send(fd, start.data(), start.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(start.size()));
  }
  std::atomic<bool> stop{false};
  std::thread dripper([&] {
    while (!stop.load()) {
      for (const int fd : slow) send(fd, "a", 1, MSG_NOSIGNAL);
      for (int i = 0; i < 10 && !stop.load(); ++i) std::this_thread::sleep_for(milliseconds(50));
    }
  });

  std::chrono::microseconds slowest(0);
  for (int round = 0; round < 5; ++round) {
    for (const char* path : {"/healthz", "/readyz"}) {
      const auto start = Clock::now();
      std::string body;
      EXPECT_EQ(HttpGet(server->port(), path, &body), 200) << path;
      const auto took = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
      EXPECT_LT(took, kProbeBound) << path << " round " << round;
      slowest = std::max(slowest, took);
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  ready = false;
  EXPECT_EQ(HttpGet(server->port(), "/readyz"), 503);
  std::cout << "slowest probe with " << kIdle << " idle and " << kSlow
            << " slow connections open: " << slowest.count() << " us\n";
  // The server holds them all (no connection limit or backlog dropped any).
  EXPECT_EQ(ClosedByServer(idle), 0);
  EXPECT_EQ(ClosedByServer(slow), 0);

  // Stopping does not wait for them either, and closes them.
  stop = true;
  dripper.join();
  const auto start = Clock::now();
  server.reset();
  EXPECT_LT(Clock::now() - start, milliseconds(2'000));
  EXPECT_TRUE(
      gecd::testing::WaitFor([&] { return ClosedByServer(idle) == kIdle; }, milliseconds(5'000)));
  EXPECT_EQ(ClosedByServer(slow), kSlow);
  for (const int fd : idle) close(fd);
  for (const int fd : slow) close(fd);
}

// Idle connections do not stay forever: the server drops them after its connection timeout.
TEST(StatusHttpServerTest, DropsIdleConnectionsAfterTheTimeout) {
  std::atomic<bool> ready{true};
  std::unique_ptr<StatusHttpServer> server = StartOrDie(&ready);
  ASSERT_NE(server, nullptr);
  const std::vector<int> fds = {StartConnect(server->port())};
  ASSERT_TRUE(AllConnected(fds, milliseconds(5'000)));
  EXPECT_EQ(ClosedByServer(fds), 0);
  EXPECT_TRUE(gecd::testing::WaitFor([&] { return ClosedByServer(fds) == 1; },
                                     StatusHttpServer::kConnectionTimeout + milliseconds(5'000)));
  close(fds[0]);
}

StatusHttpServer::Certificate Served(const PemPair& pair, const std::string& client_ca = "") {
  return {.certificate_chain = pair.certificate, .private_key = pair.key, .client_ca = client_ca};
}

std::unique_ptr<StatusHttpServer> StartHttpsOrDie(const PemPair& pair,
                                                  const std::string& client_ca = "",
                                                  bool require_client_cert = false) {
  StatusHttpServer::Handlers handlers;
  handlers.metrics = [] { return std::string("x 1\n"); };
  handlers.ready = [] { return true; };
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> server =
      StatusHttpServer::Start("127.0.0.1:0", std::move(handlers),
                              StatusHttpServer::Https{.certificate = Served(pair, client_ca),
                                                      .require_client_cert = require_client_cert});
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(StatusHttpServerTest, ServesHttpsWithItsCertificate) {
  const TestCa ca("metrics CA");
  const PemPair pair = ca.Issue("gecd");
  std::unique_ptr<StatusHttpServer> server = StartHttpsOrDie(pair);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->https());
  HttpsConnection connection(server->port(), ca.certificate());
  ASSERT_TRUE(connection.connected());
  EXPECT_EQ(connection.server_certificate(), pair.certificate);
  std::string body;
  EXPECT_EQ(connection.Get("/metrics", &body), 200);
  EXPECT_EQ(body, "x 1\n");
  EXPECT_EQ(connection.Get("/readyz", &body), 200);  // the same connection: keep-alive
  EXPECT_EQ(body, "ready\n");
  // A client that trusts another CA does not accept the server.
  const TestCa other("another CA");
  EXPECT_FALSE(HttpsConnection(server->port(), other.certificate()).connected());
}

// Each side's mistake ends quickly: plain HTTP to the HTTPS port is closed by the failed
// handshake, and a TLS handshake with the plain HTTP port ends at the latest when the server
// drops the connection that never sent a request line.
TEST(StatusHttpServerTest, PlainHttpAndHttpsDoNotMix) {
  const TestCa ca("metrics CA");
  std::unique_ptr<StatusHttpServer> https = StartHttpsOrDie(ca.Issue("gecd"));
  ASSERT_NE(https, nullptr);
  auto start = Clock::now();
  EXPECT_EQ(HttpGet(https->port(), "/healthz"), 0);
  EXPECT_LT(Clock::now() - start, StatusHttpServer::kConnectionTimeout);

  std::atomic<bool> ready{true};
  std::unique_ptr<StatusHttpServer> plain = StartOrDie(&ready);
  ASSERT_NE(plain, nullptr);
  EXPECT_FALSE(plain->https());
  start = Clock::now();
  EXPECT_EQ(HttpsGet(plain->port(), "/healthz", ca.certificate()), 0);
  EXPECT_LT(Clock::now() - start, StatusHttpServer::kConnectionTimeout + milliseconds(3'000));
  EXPECT_FALSE(plain->UseCertificate(Served(ca.Issue("gecd"))).ok());
}

// A client that connects and never starts its handshake is dropped like an idle plain one.
TEST(StatusHttpServerTest, DropsSilentTlsClientsAfterTheTimeout) {
  const TestCa ca("metrics CA");
  std::unique_ptr<StatusHttpServer> server = StartHttpsOrDie(ca.Issue("gecd"));
  ASSERT_NE(server, nullptr);
  const std::vector<int> fds = {StartConnect(server->port())};
  ASSERT_TRUE(AllConnected(fds, milliseconds(5'000)));
  EXPECT_EQ(ClosedByServer(fds), 0);
  EXPECT_TRUE(gecd::testing::WaitFor([&] { return ClosedByServer(fds) == 1; },
                                     StatusHttpServer::kConnectionTimeout + milliseconds(5'000)));
  close(fds[0]);
}

// TLS 1.2 at least, and in TLS 1.2 only ECDHE key exchange with AES-GCM or ChaCha20-Poly1305
// (the server's key is EC, so these are the ECDSA suites).
TEST(StatusHttpServerTest, RefusesOldProtocolsAndNonAeadCiphers) {
  const TestCa ca("metrics CA");
  std::unique_ptr<StatusHttpServer> server = StartHttpsOrDie(ca.Issue("gecd"));
  ASSERT_NE(server, nullptr);
  using gecd::testing::TlsHandshakes;
  EXPECT_TRUE(TlsHandshakes(server->port(), TLS1_3_VERSION));
  EXPECT_TRUE(TlsHandshakes(server->port(), TLS1_2_VERSION));
  EXPECT_TRUE(TlsHandshakes(server->port(), TLS1_2_VERSION, "ECDHE-ECDSA-AES128-GCM-SHA256"));
  EXPECT_TRUE(TlsHandshakes(server->port(), TLS1_2_VERSION, "ECDHE-ECDSA-CHACHA20-POLY1305"));
  EXPECT_FALSE(TlsHandshakes(server->port(), TLS1_1_VERSION));
  EXPECT_FALSE(TlsHandshakes(server->port(), TLS1_VERSION));
  EXPECT_FALSE(TlsHandshakes(server->port(), TLS1_2_VERSION, "ECDHE-ECDSA-AES128-SHA"));  // CBC
  EXPECT_FALSE(TlsHandshakes(server->port(), TLS1_2_VERSION, "ECDHE-ECDSA-AES256-SHA384"));
  // AEAD, but not among gecd's ciphers (the router's OpenSSL policy has GCM and ChaCha20 only).
  EXPECT_FALSE(TlsHandshakes(server->port(), TLS1_2_VERSION, "ECDHE-ECDSA-AES128-CCM"));
}

TEST(StatusHttpServerTest, RequiredClientCertificateMustComeFromTheClientCa) {
  const TestCa ca("metrics CA"), clients("client CA"), other("another CA");
  const PemPair prometheus = clients.Issue("prometheus");
  const PemPair stranger = other.Issue("prometheus");
  std::unique_ptr<StatusHttpServer> server =
      StartHttpsOrDie(ca.Issue("gecd"), clients.certificate(), /*require_client_cert=*/true);
  ASSERT_NE(server, nullptr);
  std::string body;
  EXPECT_EQ(HttpsGet(server->port(), "/metrics", ca.certificate(), &prometheus, &body), 200);
  EXPECT_EQ(body, "x 1\n");
  EXPECT_EQ(HttpsGet(server->port(), "/metrics", ca.certificate(), nullptr, &body), 403);
  EXPECT_EQ(body, "client certificate refused\n");
  EXPECT_EQ(HttpsGet(server->port(), "/healthz", ca.certificate(), &stranger), 403);
  // Nor an expired one of the CA's.
  const PemPair expired = clients.Issue("prometheus", -7200, -3600);
  EXPECT_EQ(HttpsGet(server->port(), "/healthz", ca.certificate(), &expired), 403);
  // Refused, the connection is closed.
  HttpsConnection refused(server->port(), ca.certificate());
  EXPECT_EQ(refused.Get("/healthz"), 403);
  EXPECT_EQ(refused.Get("/healthz"), 0);
}

// With client CAs but no requirement, a client without a certificate is served and one with a
// certificate of another CA is not.
TEST(StatusHttpServerTest, OptionalClientCertificateIsVerifiedWhenPresented) {
  const TestCa ca("metrics CA"), clients("client CA"), other("another CA");
  const PemPair prometheus = clients.Issue("prometheus");
  const PemPair stranger = other.Issue("prometheus");
  std::unique_ptr<StatusHttpServer> server =
      StartHttpsOrDie(ca.Issue("gecd"), clients.certificate(), /*require_client_cert=*/false);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(HttpsGet(server->port(), "/healthz", ca.certificate()), 200);
  EXPECT_EQ(HttpsGet(server->port(), "/healthz", ca.certificate(), &prometheus), 200);
  EXPECT_EQ(HttpsGet(server->port(), "/healthz", ca.certificate(), &stranger), 403);
}

// A new certificate serves the next connections; a connection opened before keeps its
// certificate and is served its next request (then closed: it ends with that request).
TEST(StatusHttpServerTest, NewCertificateServesNewConnectionsWhileOpenOnesFinish) {
  const TestCa ca("metrics CA");
  const PemPair first = ca.Issue("gecd");
  const PemPair second = ca.Issue("gecd");
  ASSERT_NE(first.certificate, second.certificate);
  std::unique_ptr<StatusHttpServer> server = StartHttpsOrDie(first);
  ASSERT_NE(server, nullptr);
  HttpsConnection before(server->port(), ca.certificate());
  ASSERT_EQ(before.Get("/healthz"), 200);
  EXPECT_EQ(before.server_certificate(), first.certificate);

  ASSERT_TRUE(server->UseCertificate(Served(second)).ok());
  HttpsConnection after(server->port(), ca.certificate());
  ASSERT_TRUE(after.connected());
  EXPECT_EQ(after.server_certificate(), second.certificate);
  EXPECT_EQ(after.Get("/healthz"), 200);
  EXPECT_EQ(after.Get("/readyz"), 200);  // the new daemon's connections stay open

  std::string body;
  EXPECT_EQ(before.Get("/metrics", &body), 200);
  EXPECT_EQ(body, "x 1\n");
  EXPECT_EQ(before.Get("/healthz"), 0);  // closed after its request

  // A pair GnuTLS cannot use changes nothing. (A key that is not the certificate's: GnuTLS
  // 3.7.9 leaks a certificate when it is given one that is not PEM, which LeakSanitizer reports,
  // and the files are checked with OpenSSL before they reach this server anyway.)
  const absl::Status bad =
      server->UseCertificate(Served({.certificate = second.certificate, .key = first.key}));
  EXPECT_FALSE(bad.ok());
  // The reason is GnuTLS's, as libmicrohttpd logged it while the daemon started.
  EXPECT_TRUE(absl::StrContains(bad.message(),
                                "the metrics listener: libmicrohttpd did not start: GnuTLS failed "
                                "to setup x509 certificate/key: The certificate and the given key "
                                "do not match"))
      << bad;
  HttpsConnection later(server->port(), ca.certificate());
  EXPECT_EQ(later.server_certificate(), second.certificate);
  EXPECT_EQ(later.Get("/healthz"), 200);
}

// The client CAs rotate with the certificate: a new connection is verified against the new
// ones.
TEST(StatusHttpServerTest, NewClientCasVerifyNewConnections) {
  const TestCa ca("metrics CA"), old_clients("old client CA"), new_clients("new client CA");
  const PemPair old_client = old_clients.Issue("prometheus");
  const PemPair new_client = new_clients.Issue("prometheus");
  const PemPair pair = ca.Issue("gecd");
  std::unique_ptr<StatusHttpServer> server =
      StartHttpsOrDie(pair, old_clients.certificate(), /*require_client_cert=*/true);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(HttpsGet(server->port(), "/healthz", ca.certificate(), &old_client), 200);
  EXPECT_EQ(HttpsGet(server->port(), "/healthz", ca.certificate(), &new_client), 403);
  ASSERT_TRUE(server->UseCertificate(Served(pair, new_clients.certificate())).ok());
  EXPECT_EQ(HttpsGet(server->port(), "/healthz", ca.certificate(), &new_client), 200);
  EXPECT_EQ(HttpsGet(server->port(), "/healthz", ca.certificate(), &old_client), 403);
}

// Threads of this process (/proc/self/task): each libmicrohttpd daemon has one.
int ThreadCount() {
  int count = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    ++count;
  }
  return count;
}

// The daemon of the previous certificate stops once its last connection closed: at once without
// one, after its answer for a connection that sends another request, and after the connection
// timeout for an idle one.
TEST(StatusHttpServerTest, RetiredDaemonStopsOnceItsConnectionsClosed) {
  const TestCa ca("metrics CA");
  const PemPair pairs[] = {ca.Issue("gecd"), ca.Issue("gecd"), ca.Issue("gecd"), ca.Issue("gecd")};
  std::unique_ptr<StatusHttpServer> server = StartHttpsOrDie(pairs[0]);
  ASSERT_NE(server, nullptr);
  const int serving = ThreadCount();
  const auto use = [&](const PemPair& pair) {
    ASSERT_TRUE(server->UseCertificate(Served(pair)).ok());
  };
  const auto threads_back = [&](milliseconds within) {
    return gecd::testing::WaitFor([&] { return ThreadCount() == serving; }, within);
  };

  use(pairs[1]);
  EXPECT_TRUE(threads_back(milliseconds(2'000))) << ThreadCount() << " vs " << serving;

  HttpsConnection busy(server->port(), ca.certificate());
  ASSERT_EQ(busy.Get("/healthz"), 200);
  use(pairs[2]);
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(ThreadCount(), serving + 1);  // the previous daemon serves `busy` still
  EXPECT_EQ(busy.Get("/healthz"), 200);
  EXPECT_TRUE(threads_back(milliseconds(2'000))) << ThreadCount() << " vs " << serving;

  HttpsConnection idle(server->port(), ca.certificate());
  ASSERT_EQ(idle.Get("/healthz"), 200);
  const auto start = Clock::now();
  use(pairs[3]);
  EXPECT_TRUE(threads_back(StatusHttpServer::kConnectionTimeout + milliseconds(3'000)));
  EXPECT_LT(Clock::now() - start, StatusHttpServer::kRetireTimeout);
  EXPECT_EQ(idle.Get("/healthz"), 0);
  EXPECT_EQ(HttpsGet(server->port(), "/healthz", ca.certificate()), 200);
}

}  // namespace
}  // namespace gecd::daemon
