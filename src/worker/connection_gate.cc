#include "worker/connection_gate.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/bound_port.h"
#include "common/monotonic_clock.h"
#include "common/status_macros.h"
#include "daemon/listen_address.h"
#include "spdlog/spdlog.h"

namespace gecd::worker {
namespace {

// Waiting connections beyond this are refused by the kernel (which caps it at somaxconn).
constexpr int kBacklog = 4096;
// After an accept error other than "nothing waits" (out of descriptors or memory), the next
// try comes this much later: the connection still waits, and poll would report it at once, a
// busy loop.
constexpr int kAcceptErrorPauseMs = 10;
// Closed connections and accept errors are logged at most this often.
constexpr int64_t kLogEveryUs = 1'000'000;

void SetPort(sockaddr_storage& address, int port) {
  if (address.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6&>(address).sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in&>(address).sin_port = htons(static_cast<uint16_t>(port));
  }
}

// A non-blocking listening socket on `address`, or -1 with errno set. `dual_stack`: an IPv6
// socket that also takes IPv4 connections.
int ListenOn(const sockaddr_storage& address, socklen_t size, bool dual_stack) {
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  const int zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (address.ss_family == AF_INET6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual_stack ? &zero : &one, sizeof one);
  }
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), size) != 0 ||
      ::listen(fd, kBacklog) != 0) {
    const int error = errno;
    close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

}  // namespace

AdmissionWindow::AdmissionWindow(int max_admitted, std::chrono::microseconds window)
    : max_admitted_(static_cast<size_t>(std::max(1, max_admitted))), window_us_(window.count()) {}

bool AdmissionWindow::Admit(int64_t now_us) {
  while (!admitted_us_.empty() && admitted_us_.front() <= now_us - window_us_) {
    admitted_us_.pop_front();
  }
  if (admitted_us_.size() >= max_admitted_) return false;
  admitted_us_.push_back(now_us);
  return true;
}

ConnectionGate::ConnectionGate(const Options& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<ConnectionGate>> ConnectionGate::Listen(const Options& options) {
  ASSIGN_OR_RETURN(const daemon::ListenAddress address,
                   daemon::ParseListenAddress(options.listen, "server.listen"));
  const auto failed = [&](absl::string_view reason) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (server.listen): ", reason));
  };
  std::unique_ptr<ConnectionGate> gate(new ConnectionGate(options));
  gate->wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (gate->wake_ < 0) return failed(strerror(errno));
  int port = address.port;
  if (address.host.empty() || address.host == "0.0.0.0" || address.host == "::") {
    // As gRPC binds a wildcard: one IPv6 socket that takes IPv4 too, or IPv4 alone without IPv6.
    sockaddr_storage any{};
    any.ss_family = AF_INET6;  // in6addr_any: all zeros
    SetPort(any, port);
    int fd = ListenOn(any, sizeof(sockaddr_in6), /*dual_stack=*/true);
    if (fd < 0 && errno == EAFNOSUPPORT) {
      any = {};
      any.ss_family = AF_INET;  // INADDR_ANY: all zeros
      SetPort(any, port);
      fd = ListenOn(any, sizeof(sockaddr_in), /*dual_stack=*/false);
    }
    if (fd < 0) return failed(strerror(errno));
    gate->listeners_.push_back(fd);
  } else {
    absl::StatusOr<daemon::AddressList> resolved = daemon::ResolveListenAddress(address);
    if (!resolved.ok()) return failed(resolved.status().message());
    std::string errors;
    for (const addrinfo* a = resolved->get(); a != nullptr; a = a->ai_next) {
      sockaddr_storage one{};
      std::memcpy(&one, a->ai_addr, a->ai_addrlen);
      SetPort(one, port);  // port 0: every address on the port the first one got
      const int fd = ListenOn(one, a->ai_addrlen, /*dual_stack=*/false);
      if (fd < 0) {
        absl::StrAppend(&errors, errors.empty() ? "" : "; ", strerror(errno));
        continue;
      }
      gate->listeners_.push_back(fd);
      if (port == 0) port = BoundPort(fd);
    }
    // As gRPC does, one bound address is enough ("localhost" on a host without ::1).
    if (gate->listeners_.empty()) return failed(errors);
  }
  gate->port_ = port != 0 ? port : BoundPort(gate->listeners_.front());
  return gate;
}

ConnectionGate::~ConnectionGate() { Stop(); }

void ConnectionGate::Start(Handoff handoff) {
  handoff_ = std::move(handoff);
  thread_ = std::thread([this] { Run(); });
}

void ConnectionGate::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    // An eventfd's counter only fails to take 1 at its maximum, which this never reaches.
    [[maybe_unused]] const ssize_t written = write(wake_, &one, sizeof one);
    thread_.join();
  }
  for (int fd : listeners_) close(fd);
  listeners_.clear();
  if (wake_ >= 0) close(wake_);
  wake_ = -1;
}

void ConnectionGate::Run() {
  std::vector<pollfd> polled;
  for (int fd : listeners_) polled.push_back({.fd = fd, .events = POLLIN, .revents = 0});
  polled.push_back({.fd = wake_, .events = POLLIN, .revents = 0});
  AdmissionWindow window(options_.max_handshakes, options_.handshake_timeout);
  int64_t logged_us = 0;
  uint64_t refused = 0;
  uint64_t refused_logged = 0;
  while (true) {
    if (poll(polled.data(), polled.size(), -1) < 0 && errno != EINTR) {
      spdlog::error("server.listen: poll: {}; no new connections are accepted", strerror(errno));
      return;
    }
    if (polled.back().revents != 0) return;  // Stop
    bool pause = false;
    for (size_t i = 0; i + 1 < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      while (true) {
        const int fd = accept4(polled[i].fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        const int64_t now_us = MonotonicMicros();
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno != EAGAIN && errno != EWOULDBLOCK) {
            if (now_us - logged_us >= kLogEveryUs) {
              logged_us = now_us;
              spdlog::warn("server.listen: accept: {}", strerror(errno));
            }
            pause = true;
          }
          break;
        }
        if (!window.Admit(now_us)) {
          // Counted before the close: a client that sees its connection closed then finds it
          // counted (the gate's test raced here, 1 run in ~10 on a busy box).
          ++refused;
          if (options_.on_refused) options_.on_refused();
          close(fd);
          if (now_us - logged_us >= kLogEveryUs) {
            logged_us = now_us;
            spdlog::warn(
                "{} new connections closed at once: {} were accepted within "
                "server.tls_handshake_timeout_ms ({} ms), the cap on TLS handshakes in flight "
                "(server.max_tls_handshakes)",
                refused - refused_logged, options_.max_handshakes,
                options_.handshake_timeout.count());
            refused_logged = refused;
          }
          continue;
        }
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        handoff_(polled[i].fd, fd);
      }
    }
    if (pause && poll(&polled.back(), 1, kAcceptErrorPauseMs) > 0) return;  // Stop
  }
}

}  // namespace gecd::worker
