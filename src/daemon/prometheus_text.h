#ifndef GECD_DAEMON_PROMETHEUS_TEXT_H_
#define GECD_DAEMON_PROMETHEUS_TEXT_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

// Writers for the Prometheus text exposition format (version 0.0.4), shared by the daemon's
// and the router's /metrics.
namespace gecd::daemon::prometheus {

// Upper bounds (seconds) of every latency histogram gecd exports: 1 ms .. 10 s.
inline constexpr double kLatencyBounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                            0.25,  0.5,    1,     2.5,  5,     10};

inline constexpr int kNumCodes = 17;
// Where a gRPC status code is counted: itself, or UNKNOWN (2) when outside 0..16.
inline constexpr int CodeIndex(int grpc_code) {
  return grpc_code >= 0 && grpc_code < kNumCodes ? grpc_code : 2;
}
// The gRPC status code's name ("OK", "UNAVAILABLE"); codes outside 0..16 are "UNKNOWN".
std::string_view CodeName(int grpc_code);

// A label value with \, " and newline escaped.
std::string EscapeLabel(std::string_view value);

void AppendHeader(std::string& out, std::string_view name, std::string_view help,
                  std::string_view type);
void AppendScalar(std::string& out, std::string_view name, std::string_view help,
                  std::string_view type, const std::string& value);
// `counts` per bucket, not cumulative: counts[i] for values <= bounds[i] (and above the one
// before), counts[bounds.size()] for values above the last bound. `sum` in the base unit.
void AppendHistogram(std::string& out, std::string_view name, std::string_view help,
                     std::span<const double> bounds, std::span<const uint64_t> counts, double sum);

}  // namespace gecd::daemon::prometheus

#endif  // GECD_DAEMON_PROMETHEUS_TEXT_H_
