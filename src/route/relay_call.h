#ifndef GECD_ROUTE_RELAY_CALL_H_
#define GECD_ROUTE_RELAY_CALL_H_

#include <nghttp2/nghttp2.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "route/endpoint.h"
#include "route/grpc_wire.h"
#include "route/h2_connection.h"
#include "route/relay.h"
#include "route/relay_connection.h"

// One call through the relay (route/relay.h): the state machine of a client stream and, once
// sent on, its stream to an endpoint (or to the router's own server). It decides where the call
// goes (admission, draining, the EndpointSet's pick), holds a unary call's request and answer
// whole for the one retry on UNAVAILABLE, relays a stream's bytes as they flow (counting its
// gRPC messages in flight), passes cancellation both ways, and counts the call in the metrics.
// Owns its pipes and answers; the connections and the loop are borrowed. Fed by the nghttp2
// callbacks (route/relay_session_callbacks.h) and by its loop when a connection dies. Lives on
// one loop thread, never shared: not thread-safe, and takes no lock but the EndpointSet's.
// Deletes itself when both of its streams are closed.
namespace gecd::route {

class RelayLoop;

// Bytes on their way from one stream to another. The receiving side's window is handed back
// as they are taken (`source`), so the relay holds at most a window's worth per stream.
struct RelayPipe {
  std::string bytes;
  size_t at = 0;
  bool ended = false;  // nothing more comes after `bytes`
  std::optional<Headers> trailers;
  size_t size() const { return bytes.size() - at; }
};

// An endpoint's answer to a unary call, held whole until it is known not to be retried.
struct RelayAnswer {
  Headers headers;
  Headers trailers;
  std::string body;
  bool trailers_only = false;  // HEADERS with END_STREAM, no message
  int code = -1;               // grpc-status; -1 until seen
  std::string message;         // when the router made up the status
};

class RelayCall {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Kind { kUnary, kStream, kOther };

  RelayCall(RelayLoop& loop, RelayConnection* down, int32_t id);
  ~RelayCall();

  bool unary() const { return kind_ == Kind::kUnary; }

  // The client's side.
  void OnRequestHeader(std::string_view name, std::string_view value);
  void OnRequestHeaders(bool end_stream);
  void OnRequestData(const uint8_t* data, size_t size);
  void OnRequestEnd();
  void OnDownClosed();
  // The endpoint's side.
  void OnResponseHeader(std::string_view name, std::string_view value, bool trailers);
  void OnResponseHeaders(bool end_stream, bool trailers);
  void OnResponseData(const uint8_t* data, size_t size);
  void OnUpClosed(uint32_t error_code, std::string_view why);

  // nghttp2's data sources: the bytes going up to the endpoint, and down to the client.
  static ssize_t ReadUp(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                        nghttp2_data_source* source, void*);
  static ssize_t ReadDown(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                          nghttp2_data_source* source, void*);

 private:
  void Open();
  void Attempt(const Endpoint* exclude);
  bool SendUp(RelayConnection* up, nghttp2_data_source_read_callback read);
  void AnswerStatus(int code, std::string_view message);
  void Forward(RelayAnswer answer);
  void StartResponse(const Headers& headers, bool end_stream);
  void Finished(int code);
  void MaybeDelete();
  ssize_t Take(RelayPipe& pipe, RelayConnection* from, int32_t from_id, RelayConnection* to,
               int32_t to_id, uint8_t* buf, size_t length, uint32_t* flags);
  // More bytes (or their end) for the stream `to_id` of `to`.
  void Resume(RelayConnection* to, int32_t to_id);
  // Hands `size` bytes of `c`'s stream `id` back to its peer's window.
  void Consume(RelayConnection* c, int32_t id, size_t size);
  Headers UpstreamHeaders() const;

  RelayLoop& loop_;
  Relay& relay_;
  const Clock::time_point start_ = Clock::now();

  RelayConnection* down_;  // null once the client's stream is closed
  const int32_t down_id_;
  RelayConnection* up_ = nullptr;  // null while no stream to an endpoint is open
  int32_t up_id_ = -1;

  Kind kind_ = Kind::kOther;
  Headers request_headers_;
  std::string client_;  // its bearer token's name, once checked; "" without auth.tokens_file
  std::optional<Clock::time_point> deadline_;
  bool admitted_ = false;
  bool opened_ = false;      // decided where the call goes (or answered it)
  bool finished_ = false;    // counted in the metrics
  bool final_sent_ = false;  // the client's stream has its END_STREAM queued

  std::string request_;  // a unary call's message, whole
  bool request_too_big_ = false;
  RelayPipe up_pipe_;    // stream or other: the client's bytes on their way up
  RelayPipe down_pipe_;  // the endpoint's bytes on their way to the client
  bool response_started_ = false;

  std::shared_ptr<Endpoint> endpoint_;
  RelayAnswer answer_;  // unary: the current attempt's
  std::optional<RelayAnswer> first_answer_;
  bool retried_ = false;
  bool cancelled_up_ = false;  // we reset the endpoint's stream (the client went away)

  GrpcMessageCounter up_messages_;
  // CorrectResponse.sentence_answer: with stream_sentences, a text's sentences are answered
  // one by one before the text is, and only the text's own answer ends its request.
  static constexpr uint32_t kSentenceAnswerField = 10;
  GrpcMessageCounter down_messages_{kSentenceAnswerField};
  int64_t outstanding_ = 0;   // stream messages sent up and not yet answered
  int upstream_status_ = -1;  // stream or other: the endpoint's grpc-status
  int http_status_ = 0;
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_RELAY_CALL_H_
