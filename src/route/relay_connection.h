#ifndef GECD_ROUTE_RELAY_CONNECTION_H_
#define GECD_ROUTE_RELAY_CONNECTION_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "route/endpoint.h"
#include "route/h2_connection.h"

// One connection of the relay (route/relay.h), either side: its HTTP/2 connection, what it is
// for, its keepalive and write state, and the calls that have a stream on it (told when it goes
// away). Owned by its RelayLoop (route/relay_loop.h), which alone reads and writes it: not
// thread-safe, a connection lives on one relay thread.
namespace gecd::route {

class RelayCall;
class RelayLoop;

struct RelayConnection {
  using Clock = std::chrono::steady_clock;

  RelayLoop* loop = nullptr;
  std::unique_ptr<H2Connection> h2;
  bool downstream = false;             // a client's connection to the router
  std::shared_ptr<Endpoint> endpoint;  // upstream to an endpoint; null downstream or internal
  std::string peer;                    // for messages
  bool connecting = false;
  // The connect, and the TLS handshake after it, must be done by then (upstream); a client's
  // TLS handshake likewise (downstream).
  Clock::time_point connect_deadline;
  bool handshake_counted = false;  // a client's TLS handshake, counted in Relay's handshakes
  Clock::time_point last_read = Clock::now();
  std::optional<Clock::time_point> ping_sent;  // a keepalive PING is unanswered since
  bool goaway = false;                         // the peer will take no new streams
  bool dirty = false;                          // frames may be waiting to be written
  bool writable_wait = false;
  bool dead = false;
  std::unordered_set<RelayCall*> calls;
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_RELAY_CONNECTION_H_
