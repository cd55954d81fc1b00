#include "route/relay.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/loopback.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "route/fake_daemon.h"
#include "testing/daemon_process.h"

namespace gecd::route {
namespace {

using testing::FakeDaemon;
using ::testing::HasSubstr;

// The router's data path alone: an EndpointSet and the Relay on loopback (two threads, so
// calls on different connections may take different threads).
class RelayTest : public ::testing::Test {
 protected:
  void StartRouter(std::vector<std::string> addresses, int64_t max_in_flight = 1000,
                   int ejection_failures = 5) {
    EndpointSet::Options options;
    options.slow_start.window_s = 0;
    options.ejection = {.failures = ejection_failures,
                        .base = std::chrono::milliseconds(200),
                        .max = std::chrono::milliseconds(1000)};
    set_ = std::make_unique<EndpointSet>(options);
    std::vector<DiscoveredEndpoint> endpoints;
    for (auto& a : addresses) endpoints.push_back({.address = a});
    set_->Update(endpoints);
    Relay::Options relay_options = relay_options_;
    relay_options.listen = "127.0.0.1:0";
    relay_options.internal = "127.0.0.1:1";  // nothing here asks the router's own server
    relay_options.threads = 2;
    relay_options.max_in_flight = max_in_flight;
    absl::StatusOr<std::unique_ptr<Relay>> relay = Relay::Start(relay_options, *set_, metrics_);
    ASSERT_TRUE(relay.ok()) << relay.status();
    relay_ = std::move(*relay);
    stub_ = v1::GrammarCorrection::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", relay_->port()), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (relay_ != nullptr) relay_->Stop();
  }

  grpc::Status Correct(const std::string& text, v1::CorrectResponse* response,
                       std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    v1::CorrectRequest request;
    request.set_text(text);
    return stub_->Correct(&context, request, response);
  }

  std::string Metrics() { return metrics_.Format(*set_, discovery_, relay_->in_flight()); }

  // A call is counted out when both its streams are closed, a moment after the client has its
  // answer.
  void ExpectNoCallsInFlight() {
    for (int i = 0; i < 300 && relay_->in_flight() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(relay_->in_flight(), 0);
  }

  // A CorrectStream through the router that has had one message answered; nullptr (and a
  // test failure) otherwise.
  std::unique_ptr<grpc::ClientReaderWriter<v1::CorrectRequest, v1::CorrectResponse>>
  OpenStreamWithOneAnswer(grpc::ClientContext& context) {
    auto rw = stub_->CorrectStream(&context);
    v1::CorrectRequest request;
    request.set_text("m");
    v1::CorrectResponse response;
    if (!rw->Write(request) || !rw->Read(&response)) {
      ADD_FAILURE() << "the stream's first message was not answered";
      return nullptr;
    }
    return rw;
  }

  Relay::Options relay_options_;  // what StartRouter does not set
  RouteMetrics metrics_;
  DiscoveryCounters discovery_;
  std::unique_ptr<EndpointSet> set_;
  std::unique_ptr<Relay> relay_;
  std::unique_ptr<v1::GrammarCorrection::Stub> stub_;
};

TEST_F(RelayTest, UnaryCallsReachTheEndpointsAndComeBackUnchanged) {
  FakeDaemon a("a"), b("b");
  StartRouter({a.address(), b.address()});
  for (int i = 0; i < 20; ++i) {
    v1::CorrectResponse response;
    ASSERT_TRUE(Correct(absl::StrCat("s", i), &response).ok());
    EXPECT_THAT(response.corrected_text(),
                ::testing::AnyOf(absl::StrCat("a:s", i), absl::StrCat("b:s", i)));
  }
  EXPECT_EQ(a.calls() + b.calls(), 20);
  EXPECT_THAT(Metrics(), HasSubstr("gecd_route_requests_total{code=\"OK\"} 20"));
}

TEST_F(RelayTest, StatusCodesAndMessagesPassThroughAndOnlyUnavailableIsRetried) {
  FakeDaemon a("a"), b("b");
  a.AnswerWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "text: too long"));
  b.AnswerWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "text: too long"));
  StartRouter({a.address(), b.address()});
  v1::CorrectResponse response;
  const grpc::Status s = Correct("x", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "text: too long");
  EXPECT_EQ(a.calls() + b.calls(), 1);  // not retried
  EXPECT_THAT(Metrics(), HasSubstr("gecd_route_retries_total 0"));
}

TEST_F(RelayTest, UnavailableIsRetriedOnceOnAnotherEndpoint) {
  FakeDaemon bad("bad"), good("good");
  bad.AnswerWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining"));
  StartRouter({bad.address(), good.address()}, 1000, /*ejection_failures=*/1000);
  for (int i = 0; i < 30; ++i) {
    v1::CorrectResponse response;
    ASSERT_TRUE(Correct("x", &response).ok());
    EXPECT_EQ(response.corrected_text(), "good:x");
  }
  EXPECT_GT(bad.calls(), 0);
  EXPECT_EQ(good.calls(), 30);
  EXPECT_THAT(Metrics(), HasSubstr(absl::StrCat("gecd_route_retries_total ", bad.calls())));
}

TEST_F(RelayTest, ASecondUnavailableIsTheAnswer) {
  FakeDaemon a("a"), b("b");
  a.AnswerWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "a is draining"));
  b.AnswerWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "b is draining"));
  StartRouter({a.address(), b.address()}, 1000, /*ejection_failures=*/1000);
  v1::CorrectResponse response;
  const grpc::Status s = Correct("x", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), ::testing::EndsWith("is draining"));
  EXPECT_EQ(a.calls(), 1);
  EXPECT_EQ(b.calls(), 1);
}

TEST_F(RelayTest, WithOneEndpointAnUnavailableIsAnsweredAsIs) {
  FakeDaemon a("a");
  a.AnswerWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting"));
  StartRouter({a.address()}, 1000, /*ejection_failures=*/1000);
  v1::CorrectResponse response;
  const grpc::Status s = Correct("x", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(s.error_message(), "restarting");
  EXPECT_EQ(a.calls(), 1);
}

TEST_F(RelayTest, MetadataPassesBothWays) {
  FakeDaemon a("a");
  StartRouter({a.address()});
  grpc::ClientContext context;
  context.AddMetadata("x-test", "hello");
  v1::CorrectRequest request;
  request.set_text("x");
  v1::CorrectResponse response;
  ASSERT_TRUE(stub_->Correct(&context, request, &response).ok());
  auto initial = context.GetServerInitialMetadata().find("x-echo");
  ASSERT_NE(initial, context.GetServerInitialMetadata().end());
  EXPECT_EQ(std::string(initial->second.data(), initial->second.size()), "hello");
  auto trailer = context.GetServerTrailingMetadata().find("x-trailer");
  ASSERT_NE(trailer, context.GetServerTrailingMetadata().end());
  EXPECT_EQ(std::string(trailer->second.data(), trailer->second.size()), "hello");
}

TEST_F(RelayTest, DeadlineAndCancellationPropagate) {
  FakeDaemon a("a");
  a.Hold();
  StartRouter({a.address()});
  v1::CorrectResponse response;
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status s = Correct("x", &response, std::chrono::milliseconds(300));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  // The endpoint's call carried the client's deadline, and ended with it. gRPC sends a
  // deadline as a grpc-timeout header rounded up to its unit (here 1 ms), once per hop, so
  // the endpoint may see up to 2 ms more than the client set.
  constexpr auto kTimeoutRounding = std::chrono::milliseconds(2);
  EXPECT_GT(a.last_deadline_left(), std::chrono::milliseconds(0));
  EXPECT_LE(a.last_deadline_left(), std::chrono::milliseconds(300) + kTimeoutRounding);
  for (int i = 0; i < 200 && a.cancelled() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(a.cancelled(), 1);

  // A client that cancels cancels the endpoint's call too.
  grpc::ClientContext context;
  v1::CorrectRequest request;
  request.set_text("y");
  std::thread cancel([&] {
    a.WaitForCalls(2);
    context.TryCancel();
  });
  EXPECT_EQ(stub_->Correct(&context, request, &response).error_code(), grpc::StatusCode::CANCELLED);
  cancel.join();
  for (int i = 0; i < 200 && a.cancelled() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(a.cancelled(), 2);
}

TEST_F(RelayTest, TheRouterCapsItsOwnCallsInFlight) {
  FakeDaemon a("a");
  a.Hold();
  StartRouter({a.address()}, /*max_in_flight=*/2);
  std::vector<std::thread> held;
  for (int i = 0; i < 2; ++i) {
    held.emplace_back([&] {
      v1::CorrectResponse response;
      EXPECT_TRUE(Correct("x", &response).ok());
    });
  }
  ASSERT_TRUE(a.WaitForCalls(2));
  v1::CorrectResponse response;
  const grpc::Status s = Correct("x", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("route.max_in_flight"));
  a.Release();
  for (auto& t : held) t.join();
  EXPECT_THAT(Metrics(), HasSubstr("gecd_route_shed_total 1"));
  ExpectNoCallsInFlight();
  EXPECT_TRUE(Correct("x", &response).ok());  // counted out again
}

TEST_F(RelayTest, NoEligibleEndpointIsUnavailableSayingSo) {
  FakeDaemon a("a");
  StartRouter({a.address()});
  set_->Update({});
  v1::CorrectResponse response;
  const grpc::Status s = Correct("x", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("no eligible endpoint"));
}

TEST_F(RelayTest, ADeadEndpointIsEjectedAndCallsGoElsewhere) {
  FakeDaemon good("good");
  auto dead = std::make_unique<FakeDaemon>("dead");
  const std::string dead_address = dead->address();
  dead.reset();  // nothing listens there now: connections are refused
  StartRouter({dead_address, good.address()}, 1000, /*ejection_failures=*/3);
  for (int i = 0; i < 40; ++i) {
    v1::CorrectResponse response;
    ASSERT_TRUE(Correct("x", &response).ok()) << i;
  }
  EXPECT_EQ(good.calls(), 40);
  EXPECT_EQ(set_->counts().ejected, 1);
  EXPECT_THAT(Metrics(), HasSubstr("gecd_route_endpoints{state=\"ejected\"} 1"));
}

// A TCP server that answers every connection with bytes that are not HTTP/2, then closes it.
class GarbageServer {
 public:
  GarbageServer() {
    thread_ = std::thread([this] {
      for (;;) {
        const int c = accept(socket_.fd(), nullptr, nullptr);
        if (c < 0) return;  // shutdown
        const char junk[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\xff\xfe";
        (void)!write(c, junk, sizeof(junk));
        close(c);
      }
    });
  }
  ~GarbageServer() {
    shutdown(socket_.fd(), SHUT_RDWR);
    thread_.join();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", socket_.port()); }

 private:
  gecd::testing::HeldTcpPort socket_;
  std::thread thread_;
};

TEST_F(RelayTest, AnEndpointThatAnswersGarbageIsEjected) {
  FakeDaemon good("good");
  GarbageServer garbage;
  StartRouter({garbage.address(), good.address()}, 1000, /*ejection_failures=*/3);
  for (int i = 0; i < 40; ++i) {
    v1::CorrectResponse response;
    const grpc::Status s = Correct("x", &response);
    ASSERT_TRUE(s.ok()) << i << ": " << s.error_message();
  }
  EXPECT_EQ(good.calls(), 40);
  EXPECT_EQ(set_->counts().ejected, 1);
}

TEST_F(RelayTest, ASilentEndpointIsGivenUpByKeepalive) {
  // Its kernel completes the handshake (a backlog nobody accepts) and nothing more: a peer gone
  // without closing its connections.
  gecd::testing::HeldTcpPort silent;
  relay_options_.keepalive_time = std::chrono::milliseconds(200);
  relay_options_.keepalive_timeout = std::chrono::milliseconds(200);
  StartRouter({absl::StrCat("127.0.0.1:", silent.port())});
  const auto start = std::chrono::steady_clock::now();
  v1::CorrectResponse response;
  const grpc::Status s = Correct("x", &response, std::chrono::seconds(20));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("keepalive"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ExpectNoCallsInFlight();
}

TEST_F(RelayTest, AClientSpeakingGarbageIsDisconnectedAndOthersAreStillServed) {
  FakeDaemon a("a");
  StartRouter({a.address()});
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = LoopbackAddress(relay_->port());
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n\xff\xfe\x00garbage";
  ASSERT_GT(write(fd, junk, sizeof junk), 0);
  timeval timeout{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  char buffer[4096];
  ssize_t n = 0;
  while ((n = read(fd, buffer, sizeof buffer)) > 0) {
  }
  EXPECT_EQ(n, 0) << "the relay did not close the connection";  // not a timeout (-1)
  close(fd);
  v1::CorrectResponse response;
  ASSERT_TRUE(Correct("ok", &response).ok());
  EXPECT_EQ(response.corrected_text(), "a:ok");
}

TEST_F(RelayTest, WhileDrainingNewCallsAreUnavailableAndCallsInFlightFinish) {
  FakeDaemon a("a");
  a.Hold();
  StartRouter({a.address()});
  v1::CorrectResponse held_response;
  grpc::Status held_status;
  std::thread held([&] { held_status = Correct("held", &held_response); });
  ASSERT_TRUE(a.WaitForCalls(1));
  relay_->StartDraining();
  v1::CorrectResponse response;
  const grpc::Status s = Correct("new", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);  // clients retry it elsewhere
  EXPECT_THAT(s.error_message(), HasSubstr("draining"));
  EXPECT_EQ(a.calls(), 1);
  a.Release();
  held.join();
  ASSERT_TRUE(held_status.ok()) << held_status.error_message();
  EXPECT_EQ(held_response.corrected_text(), "a:held");
  ExpectNoCallsInFlight();
}

TEST_F(RelayTest, AnEndpointSetChangeNeverDropsACallInFlight) {
  FakeDaemon a("a"), b("b");
  a.Hold();
  StartRouter({a.address()});
  v1::CorrectResponse held_response;
  grpc::Status held_status;
  std::thread held([&] { held_status = Correct("held", &held_response); });
  ASSERT_TRUE(a.WaitForCalls(1));
  set_->Update({{.address = b.address()}});  // a is gone from discovery
  EXPECT_EQ(set_->counts().draining, 1);     // ... but its call is still running
  v1::CorrectResponse response;
  ASSERT_TRUE(Correct("new", &response).ok());
  EXPECT_EQ(response.corrected_text(), "b:new");
  a.Release();
  held.join();
  ASSERT_TRUE(held_status.ok()) << held_status.error_message();
  EXPECT_EQ(held_response.corrected_text(), "a:held");
  set_->Update({{.address = b.address()}});
  EXPECT_EQ(set_->counts().draining, 0);  // forgotten once idle
}

TEST_F(RelayTest, AStreamIsPinnedToOneEndpoint) {
  FakeDaemon a("a"), b("b");
  StartRouter({a.address(), b.address()});
  for (int stream = 0; stream < 4; ++stream) {
    grpc::ClientContext context;
    auto rw = stub_->CorrectStream(&context);
    std::string first;
    for (int i = 0; i < 10; ++i) {
      v1::CorrectRequest request;
      request.set_text(absl::StrCat("m", i));
      request.set_request_id(absl::StrCat(i));
      ASSERT_TRUE(rw->Write(request));
      v1::CorrectResponse response;
      ASSERT_TRUE(rw->Read(&response));
      EXPECT_EQ(response.request_id(), absl::StrCat(i));
      const std::string who = response.corrected_text().substr(0, 1);
      if (i == 0) first = who;
      EXPECT_EQ(who, first);
      EXPECT_EQ(response.corrected_text().substr(1), absl::StrCat(":m", i));
    }
    rw->WritesDone();
    EXPECT_TRUE(rw->Finish().ok());
  }
  EXPECT_EQ(a.calls() + b.calls(), 4);
  EXPECT_THAT(Metrics(), HasSubstr("gecd_route_stream_messages_total{direction=\"to_client\"} 40"));
  ExpectNoCallsInFlight();
}

TEST_F(RelayTest, AStreamEndsWithTheEndpointsStatus) {
  FakeDaemon a("a");
  StartRouter({a.address()});
  grpc::ClientContext context;
  auto rw = OpenStreamWithOneAnswer(context);
  ASSERT_NE(rw, nullptr);
  v1::CorrectResponse response;
  a.Stop();  // the endpoint goes away mid-stream
  EXPECT_FALSE(rw->Read(&response));
  const grpc::Status s = rw->Finish();
  EXPECT_FALSE(s.ok());
  ExpectNoCallsInFlight();
}

TEST_F(RelayTest, ACancelledStreamCancelsTheEndpointsStream) {
  FakeDaemon a("a");
  StartRouter({a.address()});
  grpc::ClientContext context;
  auto rw = OpenStreamWithOneAnswer(context);
  ASSERT_NE(rw, nullptr);
  context.TryCancel();
  EXPECT_EQ(rw->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ExpectNoCallsInFlight();
  // The endpoint's stream is cancelled too, not left open (its reactor ends a moment after
  // the router's call to it does).
  for (int i = 0; i < 300 && a.open_streams() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(a.open_streams(), 0);
}

}  // namespace
}  // namespace gecd::route
