#ifndef GECD_ROUTE_RELAY_LOOP_H_
#define GECD_ROUTE_RELAY_LOOP_H_

#include <nghttp2/nghttp2.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "route/endpoint.h"
#include "route/relay.h"
#include "route/relay_connection.h"

// One event loop of the relay (route/relay.h), run on its own thread: an epoll over its
// listening socket, the client connections it accepted, its connections to the endpoints and to
// the router's internal server, and a wake-up eventfd. It owns those connections (and closes
// them, telling their calls), opens upstream connections when a call needs one (a pool of
// Relay::Options::connections_per_endpoint per endpoint), writes what their sessions queued,
// and every tick times out connects and TLS handshakes, closes connections no longer needed and
// sends keepalive PINGs. Not thread-safe: everything but Wake and `stopping` runs on the loop's own
// thread.
namespace gecd::route {

class RelayLoop {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes `listen_fd` (listening, non-blocking).
  RelayLoop(Relay& relay, int listen_fd);
  ~RelayLoop();
  RelayLoop(const RelayLoop&) = delete;
  RelayLoop& operator=(const RelayLoop&) = delete;

  // Until `stopping`; then sends the clients GOAWAY and closes every connection.
  void Run();
  void Wake();  // any thread, after Relay::Stop set `stopping`
  std::atomic<bool> stopping{false};

  Relay& relay() { return relay_; }
  // A connection for a new stream to `endpoint` (or the internal server), opened when needed.
  absl::StatusOr<RelayConnection*> Upstream(const std::shared_ptr<Endpoint>& endpoint);
  // `c`'s session may have frames to write: flushed before the loop waits again.
  void MarkDirty(RelayConnection* c);

 private:
  struct Slots {
    std::vector<RelayConnection*> connections;
    size_t next = 0;
  };

  // Sends the clients GOAWAY, then closes every connection, the clients' first.
  void Shutdown();
  void Accept();
  void OnEvent(RelayConnection* c, uint32_t events);
  void FlushDirty();
  void Kill(RelayConnection* c, std::string_view why);
  void Reap();
  void Tick(Clock::time_point now);
  void Watch(RelayConnection* c, bool writable);
  RelayConnection* Adopt(int fd, bool downstream, std::shared_ptr<Endpoint> endpoint,
                         std::string peer, std::unique_ptr<tls::TlsSocket> tls);
  // A client connection whose TLS handshake just finished stops counting as one.
  void NoteHandshake(RelayConnection* c);

  Relay& relay_;
  const int listen_fd_;
  const int epoll_fd_;
  const int wake_fd_;
  nghttp2_session_callbacks* callbacks_ = nullptr;  // the same for both sides
  std::unordered_map<RelayConnection*, std::unique_ptr<RelayConnection>> connections_;
  std::unordered_map<const Endpoint*, Slots> upstreams_;  // nullptr: the internal server
  std::vector<RelayConnection*> dirty_;
  std::vector<RelayConnection*> dead_;
  Clock::time_point next_tick_ = Clock::now();
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_RELAY_LOOP_H_
