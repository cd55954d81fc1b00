#ifndef GECD_ROUTE_GRPC_WIRE_H_
#define GECD_ROUTE_GRPC_WIRE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "grpcpp/support/status.h"
#include "route/h2_connection.h"

// The few pieces of gRPC's HTTP/2 mapping the relay reads or writes itself
// (github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md): grpc-timeout, the length prefix of
// each message, grpc-message's percent-encoding, a trailers-only answer, and the code an HTTP
// status without grpc-status stands for.
namespace gecd::route {

// "1234m" and the like (at most 8 digits, units H M S m u n); nullopt when malformed.
std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value);
// `timeout` in the finest unit that fits 8 digits, rounded up (never 0).
std::string FormatGrpcTimeout(std::chrono::nanoseconds timeout);

// Counts the messages that complete as a stream's bytes go by (each is a 5-byte prefix, a
// compressed flag and a big-endian length, then that many bytes).
class GrpcMessageCounter {
 public:
  // The messages `data` completes.
  int Feed(const uint8_t* data, size_t size);

 private:
  int prefix_seen_ = 0;  // bytes of the current prefix seen (0-5)
  uint32_t length_ = 0;  // built from the prefix
  uint64_t left_ = 0;    // payload bytes still to come, once the prefix is whole
};

std::string PercentEncode(std::string_view message);
// The whole answer to a call the router answers itself: :status 200 and grpc-status.
Headers TrailersOnly(int code, std::string_view message);
// gRPC's mapping of an HTTP status that came without a grpc-status.
grpc::StatusCode CodeForHttpStatus(int http_status);

}  // namespace gecd::route

#endif  // GECD_ROUTE_GRPC_WIRE_H_
