#include "route/route_metrics.h"

#include <string_view>

#include "absl/strings/str_cat.h"

namespace gecd::route {
namespace {

using daemon::prometheus::AppendHeader;
using daemon::prometheus::AppendScalar;
using daemon::prometheus::EscapeLabel;

std::string_view StateName(Endpoint::State s) {
  switch (s) {
    case Endpoint::State::kEligible:
      return "eligible";
    case Endpoint::State::kDraining:
      return "draining";
    case Endpoint::State::kEjected:
      return "ejected";
  }
  return "eligible";
}

}  // namespace

void RouteMetrics::CallFinished(int grpc_code, double seconds) {
  calls_[daemon::prometheus::CodeIndex(grpc_code)].fetch_add(1, std::memory_order_relaxed);
  duration_.Observe(daemon::prometheus::kLatencyBounds, 1e6, seconds);
}

std::string RouteMetrics::Format(const EndpointSet& endpoints, const DiscoveryCounters& discovery,
                                 int64_t in_flight) const {
  auto load = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  std::string out;
  AppendHeader(out, "gecd_route_requests_total",
               "Calls the router answered (unary, or a whole CorrectStream), by gRPC status code.",
               "counter");
  for (int c = 0; c < daemon::prometheus::kNumCodes; ++c) {
    if (c != 0 && load(calls_[c]) == 0) continue;
    absl::StrAppend(&out, "gecd_route_requests_total{code=\"",
                    std::string(daemon::prometheus::CodeName(c)), "\"} ", load(calls_[c]), "\n");
  }
  daemon::ClientTotals clients;
  clients_.SumInto(clients);
  daemon::AppendClientTotals(
      out, "gecd_route_client_calls_total",
      "Calls of clients authenticated by bearer token (auth.tokens_file), by the token's name "
      "(\"other\" past 16 names) and gRPC status code.",
      clients);
  daemon::HistogramCounts duration;
  daemon::AddTo(duration, duration_);
  const auto& bounds = daemon::prometheus::kLatencyBounds;
  daemon::prometheus::AppendHistogram(out, "gecd_route_request_duration_seconds",
                                      "Time from a call's arrival at the router to its answer.",
                                      bounds,
                                      std::span(duration.counts).first(std::size(bounds) + 1),
                                      static_cast<double>(duration.sum_units) / 1e6);
  AppendScalar(out, "gecd_route_in_flight",
               "Calls in the router now (route.max_in_flight caps it).", "gauge",
               absl::StrCat(in_flight));
  AppendScalar(out, "gecd_route_retries_total",
               "Unary calls sent again to another endpoint after UNAVAILABLE.", "counter",
               absl::StrCat(load(retries_)));
  AppendScalar(out, "gecd_route_shed_total",
               "Calls refused with RESOURCE_EXHAUSTED at the router's own cap.", "counter",
               absl::StrCat(load(shed_)));
  AppendHeader(out, "gecd_route_tls_handshakes_total",
               "Client TLS handshakes on route.listen, by outcome (done, failed, timed_out, "
               "refused at route.max_tls_handshakes).",
               "counter");
  constexpr const char* kOutcomes[] = {"done", "failed", "timed_out", "refused"};
  for (size_t i = 0; i < std::size(kOutcomes); ++i) {
    absl::StrAppend(&out, "gecd_route_tls_handshakes_total{outcome=\"", kOutcomes[i], "\"} ",
                    load(handshakes_[i]), "\n");
  }
  AppendHeader(out, "gecd_route_stream_messages_total", "CorrectStream messages forwarded.",
               "counter");
  absl::StrAppend(&out, "gecd_route_stream_messages_total{direction=\"to_endpoint\"} ",
                  load(stream_requests_), "\n",
                  "gecd_route_stream_messages_total{direction=\"to_client\"} ",
                  load(stream_responses_), "\n");

  const EndpointSet::Counts c = endpoints.counts();
  AppendHeader(out, "gecd_route_endpoints", "Endpoints known, by state.", "gauge");
  absl::StrAppend(&out, "gecd_route_endpoints{state=\"eligible\"} ", c.eligible, "\n",
                  "gecd_route_endpoints{state=\"draining\"} ", c.draining, "\n",
                  "gecd_route_endpoints{state=\"ejected\"} ", c.ejected, "\n");
  AppendScalar(out, "gecd_route_ejections_total",
               "Endpoints ejected (consecutive failures, or a failed health check after one).",
               "counter", absl::StrCat(c.ejections));
  const std::vector<EndpointSet::EndpointStats> stats = endpoints.Stats();
  AppendHeader(out, "gecd_route_endpoint_in_flight", "Calls in flight on each endpoint.", "gauge");
  for (const auto& e : stats) {
    absl::StrAppend(&out, "gecd_route_endpoint_in_flight{endpoint=\"", EscapeLabel(e.address),
                    "\"} ", e.in_flight, "\n");
  }
  AppendHeader(out, "gecd_route_endpoint_state",
               "1 for each endpoint's current state (eligible, draining, ejected).", "gauge");
  for (const auto& e : stats) {
    absl::StrAppend(&out, "gecd_route_endpoint_state{endpoint=\"", EscapeLabel(e.address),
                    "\",state=\"", std::string(StateName(e.state)), "\"} 1\n");
  }
  AppendHeader(out, "gecd_route_endpoint_requests_total",
               "Calls (stream messages included) sent to each endpoint.", "counter");
  for (const auto& e : stats) {
    absl::StrAppend(&out, "gecd_route_endpoint_requests_total{endpoint=\"", EscapeLabel(e.address),
                    "\"} ", e.requests, "\n");
  }
  AppendScalar(out, "gecd_route_discovery_updates_total", "Endpoint sets discovery reported.",
               "counter", absl::StrCat(discovery.updates.load()));
  AppendScalar(out, "gecd_route_discovery_relists_total",
               "Full lists after the first (410 Gone, errors).", "counter",
               absl::StrCat(discovery.relists.load()));
  AppendScalar(out, "gecd_route_discovery_watch_restarts_total",
               "Watches re-opened (dropped, ended, timed out).", "counter",
               absl::StrCat(discovery.watch_restarts.load()));
  AppendScalar(out, "gecd_route_discovery_errors_total",
               "Discovery failures: requests, answers, malformed events, resolution.", "counter",
               absl::StrCat(discovery.errors.load()));
  return out;
}

}  // namespace gecd::route
