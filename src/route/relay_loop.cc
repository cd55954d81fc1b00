#include "route/relay_loop.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/listen_address.h"
#include "route/relay_call.h"
#include "route/relay_session_callbacks.h"
#include "spdlog/spdlog.h"

namespace gecd::route {
namespace {

constexpr std::chrono::milliseconds kTick{100};
constexpr int kMaxEvents = 256;

}  // namespace

RelayLoop::RelayLoop(Relay& relay, int listen_fd)
    : relay_(relay),
      listen_fd_(listen_fd),
      epoll_fd_(epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      callbacks_(NewRelaySessionCallbacks()) {
  epoll_event listen_event{.events = EPOLLIN, .data = {.ptr = nullptr}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listen_event);
  epoll_event wake_event{.events = EPOLLIN, .data = {.ptr = this}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake_event);
}

RelayLoop::~RelayLoop() {
  nghttp2_session_callbacks_del(callbacks_);
  close(wake_fd_);
  close(epoll_fd_);
  close(listen_fd_);
}

void RelayLoop::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void RelayLoop::Run() {
  epoll_event events[kMaxEvents];
  while (!stopping.load(std::memory_order_relaxed)) {
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, static_cast<int>(kTick.count()));
    for (int i = 0; i < n; ++i) {
      void* ptr = events[i].data.ptr;
      if (ptr == nullptr) {
        Accept();
      } else if (ptr == this) {
        uint64_t count = 0;
        (void)!read(wake_fd_, &count, sizeof count);
      } else {
        OnEvent(static_cast<RelayConnection*>(ptr), events[i].events);
      }
    }
    FlushDirty();
    if (const auto now = Clock::now(); now >= next_tick_) {
      Tick(now);
      next_tick_ = now + kTick;
      FlushDirty();
    }
    Reap();
  }
  Shutdown();
}

void RelayLoop::Shutdown() {
  // Tell the clients (GOAWAY, so they open no more streams here), then cut the rest.
  for (auto& [ptr, c] : connections_) {
    if (!c->downstream || c->dead) continue;
    nghttp2_submit_goaway(c->h2->session(), NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(c->h2->session()),
                          NGHTTP2_NO_ERROR, nullptr, 0);
    MarkDirty(c.get());
  }
  FlushDirty();
  // The clients' side first: a call whose client is gone is not retried when its endpoint's
  // connection closes next, so no new connection opens on the way out.
  for (const bool downstream : {true, false}) {
    std::vector<RelayConnection*> doomed;
    for (auto& [ptr, c] : connections_) {
      if (c->downstream == downstream) doomed.push_back(ptr);
    }
    for (RelayConnection* c : doomed) Kill(c, "the router stopped");
  }
  Reap();
}

void RelayLoop::Accept() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        spdlog::warn("route: accept: {}", strerror(errno));
      }
      return;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const tls::ListenerTls* listener_tls = relay_.options_.tls;
    if (listener_tls == nullptr) {
      Adopt(fd, /*downstream=*/true, nullptr, "client", nullptr);
      continue;
    }
    if (!relay_.AdmitHandshake()) {
      spdlog::debug(
          "route: {} TLS handshakes in flight (route.max_tls_handshakes): a new "
          "connection closed",
          relay_.options_.max_handshakes);
      close(fd);
      continue;
    }
    absl::StatusOr<std::unique_ptr<tls::TlsSocket>> tls =
        tls::TlsSocket::Create(listener_tls->context(), fd, tls::TlsSocket::Side::kServer, "");
    if (!tls.ok()) {
      spdlog::warn("route: {}", std::string(tls.status().message()));
      relay_.HandshakeEnded(RouteMetrics::Handshake::kFailed);
      close(fd);
      continue;
    }
    RelayConnection* c = Adopt(fd, /*downstream=*/true, nullptr, "client", *std::move(tls));
    c->handshake_counted = true;
    c->connect_deadline = Clock::now() + relay_.options_.handshake_timeout;
  }
}

void RelayLoop::NoteHandshake(RelayConnection* c) {
  if (!c->handshake_counted || c->h2->handshaking()) return;
  c->handshake_counted = false;
  relay_.HandshakeEnded(RouteMetrics::Handshake::kDone);
}

RelayConnection* RelayLoop::Adopt(int fd, bool downstream, std::shared_ptr<Endpoint> endpoint,
                                  std::string peer, std::unique_ptr<tls::TlsSocket> tls) {
  auto owned = std::make_unique<RelayConnection>();
  RelayConnection* c = owned.get();
  c->loop = this;
  c->downstream = downstream;
  c->endpoint = std::move(endpoint);
  c->peer = std::move(peer);
  c->h2 = std::make_unique<H2Connection>(
      fd, downstream ? H2Connection::Side::kServer : H2Connection::Side::kClient, callbacks_, c,
      std::move(tls));
  connections_.emplace(c, std::move(owned));
  epoll_event event{.events = EPOLLIN, .data = {.ptr = c}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
  MarkDirty(c);  // its SETTINGS
  return c;
}

absl::StatusOr<RelayConnection*> RelayLoop::Upstream(const std::shared_ptr<Endpoint>& endpoint) {
  Slots& slots = upstreams_[endpoint.get()];
  const size_t n =
      endpoint == nullptr ? 1 : static_cast<size_t>(relay_.options_.connections_per_endpoint);
  if (slots.connections.size() != n) slots.connections.resize(n, nullptr);
  RelayConnection*& c = slots.connections[slots.next++ % n];
  if (c != nullptr && (c->goaway || nghttp2_session_check_request_allowed(c->h2->session()) == 0)) {
    c = nullptr;  // it finishes its streams and closes; new ones go on a new connection
  }
  if (c == nullptr) {
    const std::string& address =
        endpoint == nullptr ? relay_.options_.internal : endpoint->address();
    ASSIGN_OR_RETURN(const int fd, ConnectNonBlocking(address));
    std::unique_ptr<tls::TlsSocket> tls;
    if (const tls::UpstreamTls* upstream_tls = relay_.options_.upstream_tls;
        endpoint != nullptr && upstream_tls != nullptr) {
      absl::StatusOr<daemon::ListenAddress> parsed =
          daemon::ParseListenAddress(address, "endpoint");
      absl::StatusOr<std::unique_ptr<tls::TlsSocket>> made =
          parsed.ok()
              ? tls::TlsSocket::Create(upstream_tls->context(), fd, tls::TlsSocket::Side::kClient,
                                       upstream_tls->PeerName(parsed->host))
              : parsed.status();
      if (!made.ok()) {
        close(fd);
        return made.status();
      }
      tls = *std::move(made);
    }
    c = Adopt(fd, /*downstream=*/false, endpoint, address, std::move(tls));
    c->connecting = true;
    c->connect_deadline = Clock::now() + relay_.options_.connect_timeout;
    Watch(c, /*writable=*/true);
  }
  return c;
}

void RelayLoop::MarkDirty(RelayConnection* c) {
  if (c->dirty || c->dead) return;
  c->dirty = true;
  dirty_.push_back(c);
}

void RelayLoop::OnEvent(RelayConnection* c, uint32_t events) {
  if (c->dead) return;
  if (c->connecting) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
    int error = 0;
    socklen_t size = sizeof error;
    getsockopt(c->h2->fd(), SOL_SOCKET, SO_ERROR, &error, &size);
    if (error != 0) {
      Kill(c, absl::StrCat("connect: ", strerror(error)));
      return;
    }
    c->connecting = false;
    MarkDirty(c);
  }
  // A TLS read that stopped for the socket to take bytes goes on when it is writable.
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 ||
      ((events & EPOLLOUT) != 0 && c->h2->read_wants_write())) {
    if (absl::Status read = c->h2->Read(); !read.ok()) {
      Kill(c, std::string(read.message()));
      return;
    }
    NoteHandshake(c);
    c->last_read = Clock::now();
    c->ping_sent.reset();
    MarkDirty(c);  // what the peer said may want an answer (SETTINGS ack, window updates)
  }
  if ((events & EPOLLOUT) != 0) MarkDirty(c);
}

void RelayLoop::FlushDirty() {
  while (!dirty_.empty()) {
    std::vector<RelayConnection*> batch;
    batch.swap(dirty_);
    for (RelayConnection* c : batch) {
      c->dirty = false;
      if (c->dead || c->connecting) continue;
      absl::StatusOr<bool> more = c->h2->Flush();
      if (!more.ok()) {
        Kill(c, std::string(more.status().message()));
        continue;
      }
      NoteHandshake(c);
      Watch(c, *more);
      if (c->h2->Over()) Kill(c, "closed");
    }
  }
}

void RelayLoop::Watch(RelayConnection* c, bool writable) {
  if (c->writable_wait == writable) return;
  c->writable_wait = writable;
  epoll_event event{.events = EPOLLIN | (writable ? EPOLLOUT : 0u), .data = {.ptr = c}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->h2->fd(), &event);
}

void RelayLoop::Kill(RelayConnection* c, std::string_view why) {
  if (c->dead) return;
  c->dead = true;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->h2->fd(), nullptr);
  if (c->handshake_counted) {
    c->handshake_counted = false;
    spdlog::debug("route: a client's TLS handshake failed: {}", why);
    relay_.HandshakeEnded(RouteMetrics::Handshake::kFailed);
  }
  if (!c->downstream) {
    if (auto it = upstreams_.find(c->endpoint.get()); it != upstreams_.end()) {
      std::replace(it->second.connections.begin(), it->second.connections.end(), c,
                   static_cast<RelayConnection*>(nullptr));
    }
    if (!c->calls.empty()) {
      spdlog::debug("route: connection to {} lost with {} streams: {}", c->peer, c->calls.size(),
                    why);
    }
  }
  const std::vector<RelayCall*> calls(c->calls.begin(), c->calls.end());
  const std::string reason(why);
  for (RelayCall* call : calls) {
    if (c->downstream) {
      call->OnDownClosed();
    } else {
      call->OnUpClosed(NGHTTP2_CONNECT_ERROR, reason);
    }
  }
  dead_.push_back(c);
}

void RelayLoop::Reap() {
  for (RelayConnection* c : dead_) connections_.erase(c);
  dead_.clear();
}

void RelayLoop::Tick(Clock::time_point now) {
  const Relay::Options& options = relay_.options_;
  std::vector<std::pair<RelayConnection*, const char*>> doomed;
  for (auto& [ptr, c] : connections_) {
    if (c->dead) continue;
    if (c->downstream) {
      if (c->handshake_counted && now >= c->connect_deadline) {
        c->handshake_counted = false;
        relay_.HandshakeEnded(RouteMetrics::Handshake::kTimedOut);
        doomed.emplace_back(ptr, "TLS handshake timed out");
      }
      continue;
    }
    if (c->connecting && now >= c->connect_deadline) {
      doomed.emplace_back(ptr, "connect timed out");
    } else if (c->h2->handshaking() && now >= c->connect_deadline) {
      doomed.emplace_back(ptr, "TLS handshake timed out");
    } else if (c->calls.empty() &&
               (c->goaway || (c->endpoint != nullptr && c->endpoint->removed.load()))) {
      doomed.emplace_back(ptr, "no longer needed");
    } else if (c->h2->Over()) {
      doomed.emplace_back(ptr, "closed");
    } else if (c->ping_sent.has_value() && now - *c->ping_sent >= options.keepalive_timeout) {
      doomed.emplace_back(ptr, "no answer to a keepalive PING");
    } else if (!c->ping_sent.has_value() && now - c->last_read >= options.keepalive_time &&
               std::any_of(c->calls.begin(), c->calls.end(),
                           [](const RelayCall* call) { return call->unary(); })) {
      nghttp2_submit_ping(c->h2->session(), NGHTTP2_FLAG_NONE, nullptr);
      c->ping_sent = now;
      MarkDirty(c.get());
    }
  }
  for (auto [c, why] : doomed) Kill(c, why);
  std::erase_if(upstreams_, [](const auto& entry) {
    const auto& slots = entry.second.connections;
    return std::all_of(slots.begin(), slots.end(), [](auto* c) { return c == nullptr; });
  });
}

}  // namespace gecd::route
