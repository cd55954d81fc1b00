#include "route/router.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_callback.h"
#include "gtest/gtest.h"
#include "route/fake_daemon.h"
#include "testing/daemon_process.h"
#include "testing/run_gecd.h"
#include "testing/scoped_temp_dir.h"
#include "tls/test_certificates.h"

namespace gecd::route {
namespace {

using testing::FakeDaemon;
using ::testing::HasSubstr;

config::Config RouterConfig(const std::vector<std::string>& endpoints) {
  config::Config c;
  c.route.listen = "127.0.0.1:0";
  c.route.metrics_listen = "127.0.0.1:0";
  c.route.static_endpoints = endpoints;
  c.route.ejection_failures = 2;
  c.route.ejection_base_ms = 100;
  return c;
}

std::string Bytes(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  (void)b.Dump(&slices);
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// The router's own grpc.health.v1 answer for the whole server ("") or a service by name: the
// raw HealthCheckResponse.
std::string HealthCheck(grpc::GenericStub& stub, const std::string& service = "") {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // HealthCheckRequest{service = 1 (length-delimited)}; "" is the empty message.
  grpc::ByteBuffer request = Buffer(
      service.empty()
          ? ""
          : absl::StrCat("\x0a", std::string(1, static_cast<char>(service.size())), service));
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status s = done.get_future().get();
  return s.ok() ? Bytes(response) : absl::StrCat("error ", s.error_code());
}

// One ServerReflectionRequest{list_services: ""} on the reflection stream; its raw answer.
std::string ListServices(grpc::GenericStub& stub) {
  class Call final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    void OnWriteDone(bool) override { StartWritesDone(); }
    void OnReadDone(bool ok) override {
      if (ok) answer = Bytes(response);
    }
    void OnDone(const grpc::Status&) override { done.set_value(); }
    grpc::ByteBuffer request = Buffer(std::string("\x3a\x00", 2));  // field 7, ""
    grpc::ByteBuffer response;
    std::string answer;
    std::promise<void> done;
  } call;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  stub.PrepareBidiStreamingCall(&context,
                                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                grpc::StubOptions(), &call);
  call.StartWrite(&call.request);
  call.StartRead(&call.response);
  call.StartCall();
  call.done.get_future().wait();
  return call.answer;
}

// A Correct("text") through `stub`, with a deadline.
grpc::Status Correct(v1::GrammarCorrection::Stub& stub, const std::string& text,
                     v1::CorrectResponse* response,
                     std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  v1::CorrectRequest request;
  request.set_text(text);
  return stub.Correct(&context, request, response);
}

std::unique_ptr<v1::GrammarCorrection::Stub> StubFor(const Router& router) {
  return v1::GrammarCorrection::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", router.port()), grpc::InsecureChannelCredentials()));
}

TEST(RouterTest, ServesHealthReflectionAndItsOperatorEndpoint) {
  FakeDaemon a("a");
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(RouterConfig({a.address()}));
  ASSERT_TRUE(router.ok()) << router.status();
  grpc::GenericStub stub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*router)->port()),
                                             grpc::InsecureChannelCredentials()));
  EXPECT_EQ(HealthCheck(stub), std::string("\x08\x01", 2));  // SERVING
  EXPECT_EQ(HealthCheck(stub, "gecd.v1.GrammarCorrection"), std::string("\x08\x01", 2));
  EXPECT_THAT(ListServices(stub), HasSubstr("gecd.v1.GrammarCorrection"));
  const int http = (*router)->metrics_port();
  EXPECT_EQ(gecd::testing::HttpGet(http, "/healthz"), 200);
  EXPECT_EQ(gecd::testing::HttpGet(http, "/readyz"), 200);
  std::string metrics;
  ASSERT_EQ(gecd::testing::HttpGet(http, "/metrics", &metrics), 200);
  EXPECT_EQ(gecd::testing::MetricValue(metrics, "gecd_route_endpoints{state=\"eligible\"}"), 1);
  EXPECT_EQ(gecd::testing::MetricValue(metrics, "gecd_route_discovery_updates_total"), 1);

  (*router)->Drain(std::chrono::milliseconds(100));
  EXPECT_EQ(gecd::testing::HttpGet(http, "/readyz"), 503);
}

// While it drains (here: the quiet period, with no calls) the router answers NOT_SERVING for
// the service by name as well as for "".
TEST(RouterTest, DrainingIsNotServingForTheServiceByName) {
  FakeDaemon a("a");
  config::Config config = RouterConfig({a.address()});
  config.route.drain_quiet_ms = 60000;
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(config);
  ASSERT_TRUE(router.ok()) << router.status();
  grpc::GenericStub stub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*router)->port()),
                                             grpc::InsecureChannelCredentials()));
  ASSERT_EQ(HealthCheck(stub, "gecd.v1.GrammarCorrection"), std::string("\x08\x01", 2));
  // A call just now: the drain then waits out the quiet period (here: the 3 s grace).
  v1::CorrectResponse response;
  ASSERT_TRUE(Correct(*StubFor(**router), "x", &response).ok());
  std::thread drain([&] { (*router)->Drain(std::chrono::seconds(3)); });
  EXPECT_TRUE(gecd::testing::WaitFor(
      [&] { return HealthCheck(stub, "gecd.v1.GrammarCorrection") == std::string("\x08\x02", 2); },
      std::chrono::seconds(5)));
  EXPECT_EQ(HealthCheck(stub), std::string("\x08\x02", 2));
  drain.join();
}

// With auth.tokens_file the router refuses gecd calls without a valid bearer token itself
// (UNAUTHENTICATED, nothing reaches a daemon), relays the rest with their authorization metadata,
// counts them by the token's name, and leaves health checks open.
TEST(RouterTest, BearerTokensLetInOnlyTheirClients) {
  FakeDaemon a("a");
  gecd::testing::ScopedTempDir dir;
  config::Config config = RouterConfig({a.address()});
  config.auth.tokens_file = dir.path() + "/tokens";
  // SHA-256 of "abc" (FIPS 180-2's test vector).
  gecd::testing::WriteTestFile(
      config.auth.tokens_file,
      "frontend ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n");
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(config);
  ASSERT_TRUE(router.ok()) << router.status();
  auto stub = StubFor(**router);
  const auto correct = [&](const std::string& authorization) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    v1::CorrectRequest request;
    request.set_text("x");
    v1::CorrectResponse response;
    return stub->Correct(&context, request, &response);
  };
  const grpc::Status missing = correct("");
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(missing.error_message(), HasSubstr("no bearer token"));
  EXPECT_EQ(correct("Bearer abd").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(correct("Bearer abc").error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(a.calls(), 1);  // the refused ones never reached it
  grpc::GenericStub generic(grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*router)->port()),
                                                grpc::InsecureChannelCredentials()));
  EXPECT_EQ(HealthCheck(generic, "gecd.v1.GrammarCorrection"), std::string("\x08\x01", 2));
  std::string metrics;
  ASSERT_EQ(gecd::testing::HttpGet((*router)->metrics_port(), "/metrics", &metrics), 200);
  EXPECT_EQ(gecd::testing::MetricValue(
                metrics, "gecd_route_client_calls_total{client=\"frontend\",code=\"OK\"}"),
            1);
  EXPECT_EQ(
      gecd::testing::MetricValue(metrics, "gecd_route_requests_total{code=\"UNAUTHENTICATED\"}"),
      2);
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr("abc")));
}

TEST(RouterTest, NoEligibleEndpointMeansNotReady) {
  auto gone = std::make_unique<FakeDaemon>("gone");
  const std::string address = gone->address();
  gone.reset();
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(RouterConfig({address}));
  ASSERT_TRUE(router.ok()) << router.status();
  auto stub = StubFor(**router);
  // Refused connections: two failures eject the only endpoint.
  for (int i = 0; i < 2; ++i) {
    v1::CorrectResponse response;
    EXPECT_EQ(Correct(*stub, "", &response).error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  const int http = (*router)->metrics_port();
  EXPECT_TRUE(gecd::testing::WaitFor([&] { return gecd::testing::HttpGet(http, "/readyz") == 503; },
                                     std::chrono::seconds(5)));
  grpc::GenericStub generic(grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*router)->port()),
                                                grpc::InsecureChannelCredentials()));
  EXPECT_TRUE(gecd::testing::WaitFor(
      [&] { return HealthCheck(generic) == std::string("\x08\x02", 2); },  // NOT_SERVING
      std::chrono::seconds(5)));
}

TEST(RouterTest, BadSettingsAreStartUpErrorsNamingTheKey) {
  FakeDaemon a("a");
  config::Config taken = RouterConfig({a.address()});
  gecd::testing::HeldTcpPort port;
  taken.route.listen = absl::StrCat("127.0.0.1:", port.port());
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(taken);
  // gRPC binds with SO_REUSEPORT; a port held without it is refused.
  ASSERT_FALSE(router.ok());
  EXPECT_THAT(router.status().message(), HasSubstr("route.listen"));

  config::Config tokens = RouterConfig({a.address()});
  tokens.auth.tokens_file = "/nonexistent/gecd/tokens";
  router = Router::Start(tokens);
  ASSERT_FALSE(router.ok());
  EXPECT_THAT(router.status().message(), HasSubstr("auth.tokens_file"));
  EXPECT_THAT(router.status().message(), HasSubstr("/nonexistent/gecd/tokens"));

  config::Config metrics = RouterConfig({a.address()});
  metrics.route.metrics_listen = absl::StrCat("127.0.0.1:", port.port());
  router = Router::Start(metrics);
  ASSERT_FALSE(router.ok());
  EXPECT_THAT(router.status().message(), HasSubstr("route.metrics_listen"));
}

TEST(RouterTest, DrainLetsTheCallsInFlightFinish) {
  FakeDaemon a("a");
  a.Hold();
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(RouterConfig({a.address()}));
  ASSERT_TRUE(router.ok()) << router.status();
  auto stub = StubFor(**router);
  grpc::Status held_status;
  v1::CorrectResponse held_response;
  std::thread held([&] { held_status = Correct(*stub, "held", &held_response); });
  ASSERT_TRUE(a.WaitForCalls(1));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    a.Release();
  });
  const auto start = std::chrono::steady_clock::now();
  (*router)->Drain(std::chrono::seconds(5));
  // Drain returned once the call ended, long before the grace period did.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  held.join();
  release.join();
  EXPECT_TRUE(held_status.ok()) << held_status.error_message();
  EXPECT_EQ(held_response.corrected_text(), "a:held");
}

TEST(RouterTest, ADrainAnswersUnavailableUntilCallsStopComing) {
  FakeDaemon a("a");
  config::Config c = RouterConfig({a.address()});
  c.route.drain_quiet_ms = 1000;
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(c);
  ASSERT_TRUE(router.ok()) << router.status();
  auto stub = StubFor(**router);
  auto correct = [&] {
    v1::CorrectResponse response;
    return Correct(*stub, "x", &response, std::chrono::seconds(5));
  };
  ASSERT_TRUE(correct().ok());
  std::atomic<bool> drained{false};
  std::thread drain([&] {
    (*router)->Drain(std::chrono::seconds(20));
    drained = true;
  });
  // Calls keep coming, so the drain goes on, answering each UNAVAILABLE (which clients retry
  // elsewhere), never CANCELLED.
  int unavailable = 0;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
       std::chrono::steady_clock::now() < until;) {
    const grpc::Status s = correct();
    if (!s.ok()) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("draining"));
      ++unavailable;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GT(unavailable, 3);
  EXPECT_FALSE(drained.load());
  // Then none come: the drain ends a quiet period after the last one.
  const auto last = std::chrono::steady_clock::now();
  drain.join();
  const auto quiet = std::chrono::steady_clock::now() - last;
  EXPECT_GE(quiet, std::chrono::milliseconds(700));
  EXPECT_LT(quiet, std::chrono::seconds(10));
}

TEST(RouterTest, ADrainCutsOffWhatStillRunsWhenTheGraceIsOver) {
  FakeDaemon a("a");
  a.Hold();
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(RouterConfig({a.address()}));
  ASSERT_TRUE(router.ok()) << router.status();
  auto stub = StubFor(**router);
  grpc::Status held_status;
  v1::CorrectResponse held_response;
  std::thread held(
      [&] { held_status = Correct(*stub, "held", &held_response, std::chrono::seconds(20)); });
  ASSERT_TRUE(a.WaitForCalls(1));
  const auto start = std::chrono::steady_clock::now();
  (*router)->Drain(std::chrono::milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  held.join();  // answered (not left hanging until its deadline)
  EXPECT_FALSE(held_status.ok());
  a.Release();
}

TEST(RouteCommandTest, ConfigErrorsExitTwoNamingTheKey) {
  auto r = gecd::testing::RunGecd("route --set route.endpoints.static=10.0.0.1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("route.endpoints.static: expected host:port"));
  r = gecd::testing::RunGecd("route --set route.policy=fastest");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("route.policy"));
  r = gecd::testing::RunGecd("route extra");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("no positional arguments"));
}

}  // namespace
}  // namespace gecd::route
