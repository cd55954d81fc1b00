#include "route/relay.h"

#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bound_port.h"
#include "common/status_macros.h"
#include "daemon/listen_address.h"
#include "route/relay_loop.h"

namespace gecd::route {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Relay::Relay(Options options, EndpointSet& endpoints, RouteMetrics& metrics)
    : options_(std::move(options)), endpoints_(endpoints), metrics_(metrics) {}

absl::StatusOr<std::unique_ptr<Relay>> Relay::Start(Options options, EndpointSet& endpoints,
                                                    RouteMetrics& metrics) {
  ASSIGN_OR_RETURN(daemon::ListenAddress listen,
                   daemon::ParseListenAddress(options.listen, "route.listen"));
  std::unique_ptr<Relay> relay(new Relay(std::move(options), endpoints, metrics));
  const int threads = std::max(1, relay->options_.threads);
  for (int i = 0; i < threads; ++i) {
    ASSIGN_OR_RETURN(daemon::AddressList addresses, daemon::ResolveListenAddress(listen));
    const addrinfo* a = addresses.get();
    const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (fd < 0 || bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 4096) != 0) {
      const int error = errno;
      if (fd >= 0) close(fd);
      return absl::UnavailableError(absl::StrCat("cannot listen on ", relay->options_.listen,
                                                 " (route.listen): ", strerror(error)));
    }
    // The other threads share the port the first one got.
    if (listen.port == 0) listen.port = BoundPort(fd);
    relay->loops_.push_back(std::make_unique<RelayLoop>(*relay, fd));
  }
  relay->port_ = listen.port;
  for (auto& loop : relay->loops_) {
    relay->threads_.emplace_back([l = loop.get()] { l->Run(); });
  }
  return relay;
}

Relay::~Relay() { Stop(); }

std::chrono::steady_clock::time_point Relay::last_arrival() const {
  return Clock::time_point(Clock::duration(last_arrival_.load(std::memory_order_relaxed)));
}

bool Relay::Admit() {
  if (in_flight_.fetch_add(1, std::memory_order_relaxed) < options_.max_in_flight) return true;
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  metrics_.Shed();
  return false;
}

bool Relay::AdmitHandshake() {
  if (handshakes_.fetch_add(1, std::memory_order_relaxed) < options_.max_handshakes) return true;
  handshakes_.fetch_sub(1, std::memory_order_relaxed);
  metrics_.HandshakeEnded(RouteMetrics::Handshake::kRefused);
  return false;
}

void Relay::HandshakeEnded(RouteMetrics::Handshake how) {
  handshakes_.fetch_sub(1, std::memory_order_relaxed);
  metrics_.HandshakeEnded(how);
}

void Relay::Stop() {
  for (auto& loop : loops_) {
    loop->stopping.store(true);
    loop->Wake();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  loops_.clear();
}

}  // namespace gecd::route
