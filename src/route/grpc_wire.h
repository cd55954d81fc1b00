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
// compressed flag and a big-endian length, then that many bytes). Given an interim field, it
// also tells which of them carry that length-delimited top-level field in their protobuf
// payload, read as the bytes go by without holding them: on CorrectStream, a response with
// `sentence_answer` answers one sentence of a text, not the text. A compressed payload, or one
// that does not parse as protobuf before the field, counts as not carrying it.
class GrpcMessageCounter {
 public:
  GrpcMessageCounter() = default;
  explicit GrpcMessageCounter(uint32_t interim_field) : interim_field_(interim_field) {}

  // The messages `data` completes; `interim` (if given) is told how many of them carried the
  // interim field.
  int Feed(const uint8_t* data, size_t size, int* interim = nullptr);

 private:
  // Where the payload's reading is: in a field's key, a varint value, a length, the bytes a
  // length or fixed width skips, or done (the field found, or the payload unreadable).
  enum class Scan { kKey, kVarint, kLength, kSkip, kDone };
  void ScanPayload(const uint8_t* data, size_t size);

  const uint32_t interim_field_ = 0;  // 0: none
  int prefix_seen_ = 0;               // bytes of the current prefix seen (0-5)
  uint32_t length_ = 0;               // built from the prefix
  uint64_t left_ = 0;                 // payload bytes still to come, once the prefix is whole
  bool compressed_ = false;           // the current message's flag
  Scan scan_ = Scan::kKey;
  uint64_t varint_ = 0;  // a key or length read so far
  int shift_ = 0;        // its bits read so far
  uint64_t skip_ = 0;    // bytes still to skip in kSkip
  bool interim_seen_ = false;
};

std::string PercentEncode(std::string_view message);
// The whole answer to a call the router answers itself: :status 200 and grpc-status.
Headers TrailersOnly(int code, std::string_view message);
// gRPC's mapping of an HTTP status that came without a grpc-status.
grpc::StatusCode CodeForHttpStatus(int http_status);

}  // namespace gecd::route

#endif  // GECD_ROUTE_GRPC_WIRE_H_
