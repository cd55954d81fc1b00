#include "worker/connection_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"

namespace gecd::worker {
namespace {

using ::testing::HasSubstr;

TEST(AdmissionWindowTest, AdmitsAtMostTheCapWithinTheWindow) {
  AdmissionWindow window(3, std::chrono::microseconds(1000));
  EXPECT_TRUE(window.Admit(0));
  EXPECT_TRUE(window.Admit(10));
  EXPECT_TRUE(window.Admit(20));
  EXPECT_FALSE(window.Admit(30));
  EXPECT_FALSE(window.Admit(999));
  // The first admission leaves the window at 1000, the next two at 1010 and 1020.
  EXPECT_TRUE(window.Admit(1000));
  EXPECT_FALSE(window.Admit(1005));
  EXPECT_TRUE(window.Admit(1010));
  EXPECT_TRUE(window.Admit(1020));
  EXPECT_FALSE(window.Admit(1500));
}

TEST(AdmissionWindowTest, ARefusalIsNotCounted) {
  AdmissionWindow window(1, std::chrono::microseconds(100));
  EXPECT_TRUE(window.Admit(0));
  for (int t = 1; t < 100; ++t) EXPECT_FALSE(window.Admit(t));
  EXPECT_TRUE(window.Admit(100));  // refusals in between did not push the window on
}

// The default options on `listen`.
ConnectionGate::Options On(std::string listen) {
  ConnectionGate::Options options;
  options.listen = std::move(listen);
  return options;
}

// A TCP connection to 127.0.0.1:port; -1 if it cannot connect.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
    return fd;
  }
  if (fd >= 0) close(fd);
  return -1;
}

// True once the peer closed `fd` within `timeout`.
bool ClosedByPeer(int fd, std::chrono::milliseconds timeout) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
  char byte;
  return recv(fd, &byte, 1, 0) <= 0;
}

// What the gate handed off, as gRPC would take it. Thread-safe.
class Taken {
 public:
  ~Taken() {
    MutexLock lock(&mu_);
    for (int fd : fds_) close(fd);
  }
  ConnectionGate::Handoff Handoff() {
    return [this](int, int fd) {
      MutexLock lock(&mu_);
      fds_.push_back(fd);
    };
  }
  // How many were taken once `n` were, or after 10 s.
  size_t WaitFor(size_t n) {
    MutexLock lock(&mu_);
    // Await calls the condition with mu_ held, which the analysis cannot see through.
    mu_.AwaitWithTimeout([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return fds_.size() >= n; },
                         std::chrono::seconds(10));
    return fds_.size();
  }

 private:
  Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
};

TEST(ConnectionGateTest, ClosesConnectionsPastTheCapUntilTheTimeoutHasPassed) {
  constexpr int kCap = 5;
  constexpr auto kTimeout = std::chrono::milliseconds(1500);
  std::atomic<int> refused{0};
  auto gate = ConnectionGate::Listen({.listen = "127.0.0.1:0",
                                      .max_handshakes = kCap,
                                      .handshake_timeout = kTimeout,
                                      .on_refused = [&] { refused.fetch_add(1); }});
  ASSERT_TRUE(gate.ok()) << gate.status();
  Taken taken;
  (*gate)->Start(taken.Handoff());
  std::vector<int> clients;
  for (int i = 0; i < kCap; ++i) {
    clients.push_back(Connect((*gate)->port()));
    ASSERT_GE(clients.back(), 0);
  }
  EXPECT_EQ(taken.WaitFor(kCap), static_cast<size_t>(kCap));
  const auto first_accepted = std::chrono::steady_clock::now();
  // Past the cap: closed at once, long before the timeout.
  const int past_cap = Connect((*gate)->port());
  ASSERT_GE(past_cap, 0);
  EXPECT_TRUE(ClosedByPeer(past_cap, kTimeout / 2));
  close(past_cap);
  EXPECT_EQ(refused.load(), 1);
  for (int fd : clients) EXPECT_FALSE(ClosedByPeer(fd, std::chrono::milliseconds(0)));
  // Once the timeout has passed since the first were accepted, a new one is taken.
  std::this_thread::sleep_until(first_accepted + kTimeout + std::chrono::milliseconds(50));
  const int later = Connect((*gate)->port());
  ASSERT_GE(later, 0);
  EXPECT_EQ(taken.WaitFor(kCap + 1), static_cast<size_t>(kCap + 1));
  EXPECT_EQ(refused.load(), 1);
  close(later);
  for (int fd : clients) close(fd);
}

TEST(ConnectionGateTest, StopClosesThePort) {
  auto gate = ConnectionGate::Listen(On("127.0.0.1:0"));
  ASSERT_TRUE(gate.ok()) << gate.status();
  Taken taken;
  (*gate)->Start(taken.Handoff());
  const int port = (*gate)->port();
  const int before = Connect(port);
  ASSERT_GE(before, 0);
  EXPECT_EQ(taken.WaitFor(1), 1u);
  (*gate)->Stop();
  (*gate)->Stop();  // idempotent
  EXPECT_EQ(Connect(port), -1);
  close(before);
}

TEST(ConnectionGateTest, AWildcardTakesIpv4AndIpv6) {
  auto gate = ConnectionGate::Listen(On("0.0.0.0:0"));
  ASSERT_TRUE(gate.ok()) << gate.status();
  Taken taken;
  (*gate)->Start(taken.Handoff());
  const int v4 = Connect((*gate)->port());
  ASSERT_GE(v4, 0);
  EXPECT_EQ(taken.WaitFor(1), 1u);
  close(v4);
  const int v6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (v6 < 0) GTEST_SKIP() << "no IPv6 here";
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_port = htons(static_cast<uint16_t>((*gate)->port()));
  address.sin6_addr = in6addr_loopback;
  if (connect(v6, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    close(v6);
    GTEST_SKIP() << "no IPv6 loopback here";
  }
  EXPECT_EQ(taken.WaitFor(2), 2u);
  close(v6);
}

TEST(ConnectionGateTest, BadAddressesNameServerListen) {
  auto malformed = ConnectionGate::Listen(On("nonsense"));
  ASSERT_FALSE(malformed.ok());
  EXPECT_THAT(malformed.status().message(), HasSubstr("server.listen"));
  auto unknown = ConnectionGate::Listen(On("no-such-host.invalid:50051"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("server.listen"));
  // A port another socket holds without SO_REUSEPORT.
  absl::StatusOr<std::unique_ptr<ConnectionGate>> taken = absl::UnknownError("not tried");
  {
    const gecd::testing::HeldTcpPort holder;
    ASSERT_GT(holder.port(), 0);
    taken = ConnectionGate::Listen(On("127.0.0.1:" + std::to_string(holder.port())));
  }
  ASSERT_FALSE(taken.ok());
  EXPECT_THAT(taken.status().message(), HasSubstr("server.listen"));
  EXPECT_THAT(taken.status().message(), HasSubstr("in use"));
}

}  // namespace
}  // namespace gecd::worker
