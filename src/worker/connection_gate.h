#ifndef GECD_WORKER_CONNECTION_GATE_H_
#define GECD_WORKER_CONNECTION_GATE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

// A cap on TLS handshakes in flight for a worker's gRPC listener. gRPC 1.51 (Debian 12's) has no
// such setting, only a handshake timeout (server.tls_handshake_timeout_ms): a flood of
// connections that never finish their handshake would hold as many sockets and handshake states
// as arrive within the timeout. So with TLS the worker accepts connections itself and hands each
// to gRPC (grpc::experimental::ExternalConnectionAcceptor, which runs the same TLS and HTTP/2
// handshakes under the same timeout), and admits at most max_handshakes within one timeout:
// every connection accepted earlier has finished its handshake or been cut off by then, so at
// most max_handshakes are in their handshake at once. A connection past the cap is closed at
// once, as route.max_tls_handshakes does on the router.
namespace gecd::worker {

// At most `max_admitted` admissions within any `window`. Not thread-safe.
class AdmissionWindow {
 public:
  AdmissionWindow(int max_admitted, std::chrono::microseconds window);

  // True, and counted, when fewer than max_admitted were admitted in (now - window, now].
  bool Admit(int64_t now_us);

 private:
  const size_t max_admitted_;
  const int64_t window_us_;
  std::deque<int64_t> admitted_us_;  // ascending; at most max_admitted_
};

// Owns the listening sockets of one worker (SO_REUSEPORT, as gRPC's own listener binds them)
// and a thread that accepts on them. Start, Stop and the destructor are called by the owner's
// thread.
class ConnectionGate {
 public:
  struct Options {
    std::string listen;  // host:port, as server.listen; port 0 picks a free one
    int max_handshakes = 1000;
    std::chrono::milliseconds handshake_timeout{10'000};
    // Called (on the gate's thread) for each connection closed past the cap.
    std::function<void()> on_refused;
  };
  // Takes an accepted, non-blocking connection and owns it from then on.
  using Handoff = std::function<void(int listener_fd, int fd)>;

  // Binds and listens: every interface (IPv6 and IPv4) for a wildcard host, else every address
  // the host resolves to. Unavailable naming server.listen when none can be bound.
  static absl::StatusOr<std::unique_ptr<ConnectionGate>> Listen(const Options& options);
  ~ConnectionGate();
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  int port() const { return port_; }
  // Starts accepting: each connection within the cap goes to `handoff`, the others are closed.
  void Start(Handoff handoff);
  // Stops accepting and closes the listening sockets, so new connections are refused by the
  // kernel; connections handed off are the handoff's. Idempotent.
  void Stop();

 private:
  explicit ConnectionGate(const Options& options);
  void Run();

  const Options options_;
  // Closed by Stop (and so by the destructor), also when Listen fails half-way.
  std::vector<int> listeners_;
  int wake_ = -1;  // an eventfd: written by Stop
  int port_ = 0;
  Handoff handoff_;
  std::thread thread_;
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_CONNECTION_GATE_H_
