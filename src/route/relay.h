#ifndef GECD_ROUTE_RELAY_H_
#define GECD_ROUTE_RELAY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "auth/token_table.h"
#include "route/endpoint_set.h"
#include "route/route_metrics.h"
#include "tls/listener_tls.h"
#include "tls/upstream_tls.h"

// `gecd route`'s data path: an HTTP/2 relay. It splices each client stream onto a stream to an
// endpoint and copies frames' bytes across, never parsing a message (it only counts gRPC's
// length-prefixed messages on a stream, for the in-flight counts). A gRPC proxy built on gRPC's
// own server and client spends most of its CPU being two full gRPC calls per call; this is what
// lets the router cost about what HAProxy does (bench/RESULTS.md).
//  - /gecd.v1.GrammarCorrection/Correct: the request is read whole, then sent to the endpoint
//    the EndpointSet picks; the answer is read whole and, when it is UNAVAILABLE (or the
//    endpoint's connection failed), the call goes once more to a different endpoint while the
//    deadline (grpc-timeout, rewritten per attempt to the time left) allows. Otherwise the
//    endpoint's headers, message and trailers go back unchanged.
//  - /gecd.v1.GrammarCorrection/CorrectStream: pinned to the endpoint picked when it opens,
//    relayed as it flows; each message counts in flight there until an answer comes back.
//  - any other path (grpc.health.v1, reflection, unknown methods) goes to `internal`, the
//    router's own gRPC server on loopback, which answers it.
// Cancellation (RST_STREAM) passes on both ways. Past `max_in_flight` gecd calls the answer is
// RESOURCE_EXHAUSTED; no eligible endpoint, or draining, is UNAVAILABLE saying so. With a token
// table a gecd call without a valid bearer token is UNAUTHENTICATED before any of that (the
// authorization metadata still goes on to the endpoint, which may check it too).
// Owns `threads` event-loop threads, each with its own listening socket on one port
// (SO_REUSEPORT: the kernel spreads client connections) and its own connections to every
// endpoint, so a call lives on one thread and takes no lock but the EndpointSet's pick.
// This class owns the threads, the listening sockets and the counts shared across them; the
// rest lives in: relay_loop.h (one thread's event loop and its connections), relay_call.h
// (one call's state machine), relay_session_callbacks.h (nghttp2's callbacks, frames to call
// events). With Options::tls the listener speaks TLS (OpenSSL, ALPN h2, handshakes bounded in
// time and number); with Options::upstream_tls so do the connections to the endpoints.
// in_flight, last_arrival and StartDraining may be called from any thread; Stop from the
// owner's.
namespace gecd::route {

class RelayLoop;

class Relay {
 public:
  struct Options {
    std::string listen;                // host:port (route.listen)
    std::string internal;              // the router's own gRPC server, host:port
    int threads = 1;                   // route.threads
    int connections_per_endpoint = 1;  // per thread (route.channels_per_endpoint)
    int64_t max_in_flight = 1 << 16;   // route.max_in_flight
    std::chrono::milliseconds connect_timeout{2000};
    // An endpoint connection that has said nothing for keepalive_time while a unary call waits
    // on it gets a PING; no answer within keepalive_timeout means the peer is gone without a
    // word (a node lost, a partition), and its calls fail over as UNAVAILABLE. Only then: a
    // quiet stream may just be idle, and gRPC servers answer pings with nothing else sent by
    // GOAWAY after a few.
    std::chrono::milliseconds keepalive_time{10000};
    std::chrono::milliseconds keepalive_timeout{5000};
    // Bearer tokens (auth.tokens_file), or null: every call is let in. Outlives the relay.
    const auth::TokenTable* tokens = nullptr;
    // TLS on `listen` (the tls section), or null: plaintext. Outlives the relay. A client's
    // handshake not done within handshake_timeout is cut off; past max_handshakes client
    // handshakes in flight (all threads together) a new connection is closed at once.
    const tls::ListenerTls* tls = nullptr;
    std::chrono::milliseconds handshake_timeout{10000};
    int max_handshakes = 1000;
    // TLS (mTLS) to the endpoints (route.upstream_tls), or null: plaintext. Outlives the relay.
    // The handshake counts in connect_timeout. The internal server stays plaintext (loopback).
    const tls::UpstreamTls* upstream_tls = nullptr;
  };

  static absl::StatusOr<std::unique_ptr<Relay>> Start(Options options, EndpointSet& endpoints,
                                                      RouteMetrics& metrics);
  ~Relay();  // Stop()

  int port() const { return port_; }
  // gecd calls (unary, or whole streams) in the relay now.
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  // When the last gecd call arrived (steady clock), for a drain's quiet period.
  std::chrono::steady_clock::time_point last_arrival() const;

  // From now on new gecd calls are answered UNAVAILABLE (clients retry elsewhere); those in
  // flight go on.
  void StartDraining() { draining_.store(true); }
  // Sends GOAWAY, cuts the calls still running, closes every connection, joins the threads.
  void Stop();

 private:
  friend class RelayLoop;  // options_
  friend class RelayCall;  // options_, endpoints_, metrics_, admission, draining, last arrival
  Relay(Options options, EndpointSet& endpoints, RouteMetrics& metrics);

  // Counts a gecd call in, or false (not counted) past max_in_flight.
  bool Admit();
  void Release() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }
  // Counts a client's TLS handshake in, or false (not counted) past max_handshakes.
  bool AdmitHandshake();
  void HandshakeEnded(RouteMetrics::Handshake how);

  const Options options_;
  EndpointSet& endpoints_;
  RouteMetrics& metrics_;
  int port_ = 0;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int> handshakes_{0};  // client TLS handshakes under way
  std::atomic<std::chrono::steady_clock::rep> last_arrival_{0};
  std::atomic<bool> draining_{false};
  std::vector<std::unique_ptr<RelayLoop>> loops_;
  std::vector<std::thread> threads_;
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_RELAY_H_
