#ifndef GECD_ROUTE_ROUTE_METRICS_H_
#define GECD_ROUTE_ROUTE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/client_counters.h"
#include "daemon/histogram.h"
#include "daemon/prometheus_text.h"
#include "route/endpoint_set.h"
#include "route/endpoint_source.h"

// The router's own counters (gecd_route_*), and their Prometheus text together with the
// endpoint set's per-endpoint figures and discovery's counters. Lock-free; any thread.
namespace gecd::route {

class RouteMetrics {
 public:
  // A call (unary, or a whole CorrectStream) answered to the client with `code`.
  void CallFinished(int grpc_code, double seconds);
  // The same call, of a client authenticated by bearer token (auth.tokens_file): counted by its
  // token's name in gecd_route_client_calls_total{client, code}.
  void ClientCallFinished(std::string_view client, int grpc_code) {
    clients_.Add(client, grpc_code);
  }
  void Retried() { retries_.fetch_add(1, std::memory_order_relaxed); }
  // Refused at the router's own cap (route.max_in_flight).
  void Shed() { shed_.fetch_add(1, std::memory_order_relaxed); }
  // A client's TLS handshake on route.listen that ended: done, failed (a plaintext client, a
  // refused certificate, the protocol), timed out (route.tls_handshake_timeout_ms), or refused
  // unstarted (route.max_tls_handshakes in flight).
  enum class Handshake { kDone, kFailed, kTimedOut, kRefused };
  void HandshakeEnded(Handshake how) {
    handshakes_[static_cast<size_t>(how)].fetch_add(1, std::memory_order_relaxed);
  }
  // A CorrectStream message forwarded to the endpoint / back to the client.
  void StreamMessage(bool to_endpoint) {
    (to_endpoint ? stream_requests_ : stream_responses_).fetch_add(1, std::memory_order_relaxed);
  }

  std::string Format(const EndpointSet& endpoints, const DiscoveryCounters& discovery,
                     int64_t in_flight) const;

 private:
  std::array<std::atomic<uint64_t>, daemon::prometheus::kNumCodes> calls_{};
  daemon::HistogramBlock duration_{};  // microseconds
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> shed_{0};
  std::array<std::atomic<uint64_t>, 4> handshakes_{};  // by Handshake
  std::atomic<uint64_t> stream_requests_{0};
  std::atomic<uint64_t> stream_responses_{0};
  daemon::ClientCounters clients_;
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_ROUTE_METRICS_H_
