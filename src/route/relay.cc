#include "route/relay.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/listen_address.h"
#include "route/grpc_wire.h"
#include "route/h2_connection.h"
#include "spdlog/spdlog.h"

namespace gecd::route {
namespace {

using Clock = std::chrono::steady_clock;
using grpc::StatusCode;

constexpr std::string_view kCorrectPath = "/gecd.v1.GrammarCorrection/Correct";
constexpr std::string_view kCorrectStreamPath = "/gecd.v1.GrammarCorrection/CorrectStream";
// gRPC's default receive limit: a client would refuse a larger answer anyway, and it bounds
// what a unary call (read whole, for the retry) holds in the router.
constexpr size_t kMaxUnaryBytes = 4 << 20;
constexpr std::chrono::milliseconds kTick{100};

constexpr int kMaxEvents = 256;

// Bytes on their way from one stream to another. The receiving side's window is handed back
// as they are taken (`source`), so the relay holds at most a window's worth per stream.
struct Pipe {
  std::string bytes;
  size_t at = 0;
  bool ended = false;  // nothing more comes after `bytes`
  std::optional<Headers> trailers;
  size_t size() const { return bytes.size() - at; }
};

// An endpoint's answer to a unary call, held whole until it is known not to be retried.
struct Answer {
  Headers headers;
  Headers trailers;
  std::string body;
  bool trailers_only = false;  // HEADERS with END_STREAM, no message
  int code = -1;               // grpc-status; -1 until seen
  std::string message;         // when the router made up the status
};

}  // namespace

class RelayCall;

// A relay connection: its HTTP/2 connection, what it is for, and the calls that have a stream
// on it (told when it goes away).
struct RelayConnection {
  RelayLoop* loop = nullptr;
  std::unique_ptr<H2Connection> h2;
  bool downstream = false;             // a client's connection to the router
  std::shared_ptr<Endpoint> endpoint;  // upstream to an endpoint; null downstream or internal
  std::string peer;                    // for messages
  bool connecting = false;
  Clock::time_point connect_deadline;
  Clock::time_point last_read = Clock::now();
  std::optional<Clock::time_point> ping_sent;  // a keepalive PING is unanswered since
  bool goaway = false;                         // the peer will take no new streams
  bool dirty = false;                          // frames may be waiting to be written
  bool writable_wait = false;
  bool dead = false;
  std::unordered_set<RelayCall*> calls;
};

// One event loop of the relay: its listening socket, the client connections it accepted, its
// connections to the endpoints and to the internal server, and the calls between them.
class RelayLoop {
 public:
  RelayLoop(Relay& relay, int listen_fd);
  ~RelayLoop();
  void Run();
  void Wake();  // from another thread, after Relay::Stop set stopping_
  std::atomic<bool> stopping{false};

  Relay& relay() { return relay_; }
  // A connection for a new stream to `endpoint` (or the internal server), opened when needed.
  absl::StatusOr<RelayConnection*> Upstream(const std::shared_ptr<Endpoint>& endpoint);
  void MarkDirty(RelayConnection* c);

 private:
  struct Slots {
    std::vector<RelayConnection*> connections;
    size_t next = 0;
  };

  void Accept();
  void OnEvent(RelayConnection* c, uint32_t events);
  void FlushDirty();
  void Kill(RelayConnection* c, std::string_view why);
  void Reap();
  void Tick(Clock::time_point now);
  void Watch(RelayConnection* c, bool writable);
  RelayConnection* Adopt(int fd, bool downstream, std::shared_ptr<Endpoint> endpoint,
                         std::string peer);

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

// One client stream and, once sent on, its stream to an endpoint. Lives on one loop; deletes
// itself when both streams are closed.
class RelayCall {
 public:
  enum class Kind { kUnary, kStream, kOther };

  RelayCall(RelayLoop& loop, RelayConnection* down, int32_t id)
      : loop_(loop), relay_(loop.relay()), down_(down), down_id_(id) {
    down_->calls.insert(this);
  }
  ~RelayCall() {
    if (admitted_) relay_.Release();
  }

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

  static ssize_t ReadUp(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                        nghttp2_data_source* source, void*) {
    auto* call = static_cast<RelayCall*>(source->ptr);
    return call->Take(call->up_pipe_, call->down_, call->down_id_, call->up_, call->up_id_, buf,
                      length, flags);
  }
  static ssize_t ReadDown(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                          nghttp2_data_source* source, void*) {
    auto* call = static_cast<RelayCall*>(source->ptr);
    return call->Take(call->down_pipe_, call->up_, call->up_id_, call->down_, call->down_id_, buf,
                      length, flags);
  }

 private:
  void Open();
  void Attempt(const Endpoint* exclude);
  bool SendUp(RelayConnection* up, nghttp2_data_source_read_callback read);
  void AnswerStatus(int code, std::string_view message);
  void Forward(Answer answer);
  void StartResponse(const Headers& headers, bool end_stream);
  void Finished(int code);
  void MaybeDelete();
  ssize_t Take(Pipe& pipe, RelayConnection* from, int32_t from_id, RelayConnection* to,
               int32_t to_id, uint8_t* buf, size_t length, uint32_t* flags);
  // More bytes (or their end) for the stream `to_id` of `to`.
  void Resume(RelayConnection* to, int32_t to_id);
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
  std::optional<Clock::time_point> deadline_;
  bool admitted_ = false;
  bool opened_ = false;      // decided where the call goes (or answered it)
  bool finished_ = false;    // counted in the metrics
  bool final_sent_ = false;  // the client's stream has its END_STREAM queued

  std::string request_;  // a unary call's message, whole
  bool request_too_big_ = false;
  Pipe up_pipe_;    // stream or other: the client's bytes on their way up
  Pipe down_pipe_;  // the endpoint's bytes on their way to the client
  bool response_started_ = false;

  std::shared_ptr<Endpoint> endpoint_;
  Answer answer_;  // unary: the current attempt's
  std::optional<Answer> first_answer_;
  bool retried_ = false;
  bool cancelled_up_ = false;  // we reset the endpoint's stream (the client went away)

  GrpcMessageCounter up_messages_;
  GrpcMessageCounter down_messages_;
  int64_t outstanding_ = 0;   // stream messages sent up and not yet answered
  int upstream_status_ = -1;  // stream or other: the endpoint's grpc-status
  int http_status_ = 0;
};

// ---------------------------------------------------------------------------------------------
// RelayCall

void RelayCall::OnRequestHeader(std::string_view name, std::string_view value) {
  if (name == ":path") {
    if (value == kCorrectPath) {
      kind_ = Kind::kUnary;
    } else if (value == kCorrectStreamPath) {
      kind_ = Kind::kStream;
    }
  } else if (name == "grpc-timeout") {
    if (auto timeout = ParseGrpcTimeout(value); timeout.has_value()) deadline_ = start_ + *timeout;
  }
  request_headers_.push_back({std::string(name), std::string(value)});
}

void RelayCall::OnRequestHeaders(bool end_stream) {
  if (kind_ != Kind::kUnary) Open();
  if (end_stream) OnRequestEnd();
}

void RelayCall::OnRequestData(const uint8_t* data, size_t size) {
  if (kind_ == Kind::kUnary) {
    // Read whole before it is sent, so the window goes back at once.
    nghttp2_session_consume(down_->h2->session(), down_id_, size);
    loop_.MarkDirty(down_);
    if (request_.size() + size > kMaxUnaryBytes) {
      request_too_big_ = true;
      request_.clear();
    }
    if (!request_too_big_) request_.append(reinterpret_cast<const char*>(data), size);
    return;
  }
  if (up_ == nullptr) {  // answered already: the bytes have nowhere to go
    nghttp2_session_consume(down_->h2->session(), down_id_, size);
    loop_.MarkDirty(down_);
    return;
  }
  if (kind_ == Kind::kStream) {
    for (int n = up_messages_.Feed(data, size); n > 0; --n) {
      ++outstanding_;
      endpoint_->CallStarted();
      relay_.metrics_.StreamMessage(/*to_endpoint=*/true);
    }
  }
  up_pipe_.bytes.append(reinterpret_cast<const char*>(data), size);
  Resume(up_, up_id_);
}

void RelayCall::OnRequestEnd() {
  if (kind_ == Kind::kUnary) {
    Open();
    return;
  }
  up_pipe_.ended = true;
  if (up_ != nullptr) Resume(up_, up_id_);
}

void RelayCall::Open() {
  if (opened_) return;
  opened_ = true;
  if (kind_ == Kind::kOther) {
    if (absl::StatusOr<RelayConnection*> up = loop_.Upstream(nullptr); !up.ok()) {
      AnswerStatus(
          static_cast<int>(StatusCode::UNAVAILABLE),
          absl::StrCat("gecd route: its own server: ", std::string(up.status().message())));
    } else if (!SendUp(*up, &RelayCall::ReadUp)) {
      AnswerStatus(static_cast<int>(StatusCode::INTERNAL), "gecd route: cannot open a stream");
    }
    return;
  }
  relay_.last_arrival_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  if (relay_.draining_.load(std::memory_order_relaxed)) {
    AnswerStatus(static_cast<int>(StatusCode::UNAVAILABLE),
                 "gecd route: draining (shutting down); retry on another router");
    return;
  }
  if (!relay_.Admit()) {
    AnswerStatus(static_cast<int>(StatusCode::RESOURCE_EXHAUSTED),
                 absl::StrCat("gecd route: ", relay_.options_.max_in_flight,
                              " calls in flight already (route.max_in_flight)"));
    return;
  }
  admitted_ = true;
  if (request_too_big_) {
    AnswerStatus(static_cast<int>(StatusCode::RESOURCE_EXHAUSTED),
                 absl::StrCat("gecd route: request larger than ", kMaxUnaryBytes, " bytes"));
    return;
  }
  Attempt(nullptr);
}

void RelayCall::Attempt(const Endpoint* exclude) {
  endpoint_ = relay_.endpoints_.Pick(exclude);
  if (endpoint_ == nullptr) {
    if (first_answer_.has_value()) {  // a retry with nowhere else to go
      Forward(std::move(*first_answer_));
    } else {
      AnswerStatus(static_cast<int>(StatusCode::UNAVAILABLE),
                   "gecd route: no eligible endpoint (none discovered, all ejected or "
                   "draining); see the router's /metrics gecd_route_endpoints");
    }
    return;
  }
  answer_ = Answer{};
  if (kind_ == Kind::kUnary) endpoint_->CallStarted();
  absl::StatusOr<RelayConnection*> up = loop_.Upstream(endpoint_);
  if (up.ok() && kind_ == Kind::kUnary) {
    up_pipe_ = Pipe{.bytes = request_, .at = 0, .ended = true, .trailers = std::nullopt};
  }
  if (!up.ok() || !SendUp(*up, &RelayCall::ReadUp)) {
    OnUpClosed(NGHTTP2_REFUSED_STREAM,
               up.ok() ? std::string("cannot open a stream") : std::string(up.status().message()));
  }
}

Headers RelayCall::UpstreamHeaders() const {
  Headers headers = request_headers_;
  if (!deadline_.has_value()) return headers;
  // The endpoint gets the time left, not the time the client gave: a retry comes later.
  const auto left = std::max(std::chrono::nanoseconds(1), *deadline_ - Clock::now());
  for (Header& h : headers) {
    if (h.name == "grpc-timeout") h.value = FormatGrpcTimeout(left);
  }
  return headers;
}

bool RelayCall::SendUp(RelayConnection* up, nghttp2_data_source_read_callback read) {
  const Headers headers = UpstreamHeaders();
  const std::vector<nghttp2_nv> nv = NameValues(headers);
  nghttp2_data_provider provider{};
  provider.source.ptr = this;
  provider.read_callback = read;
  const int32_t id =
      nghttp2_submit_request(up->h2->session(), nullptr, nv.data(), nv.size(), &provider, this);
  if (id < 0) return false;
  up_ = up;
  up_id_ = id;
  up->calls.insert(this);
  loop_.MarkDirty(up);
  return true;
}

void RelayCall::OnDownClosed() {
  RelayConnection* down = down_;
  down_ = nullptr;
  down->calls.erase(this);
  // The client cancelled (RST_STREAM) or its connection went away; or, with the answer all
  // sent, its stream ended while the endpoint's is still open (nothing more can go up).
  if (!final_sent_) Finished(static_cast<int>(StatusCode::CANCELLED));
  if (up_ != nullptr && !cancelled_up_) {
    cancelled_up_ = true;
    nghttp2_submit_rst_stream(up_->h2->session(), NGHTTP2_FLAG_NONE, up_id_,
                              final_sent_ ? NGHTTP2_NO_ERROR : NGHTTP2_CANCEL);
    loop_.MarkDirty(up_);
  }
  MaybeDelete();
}

void RelayCall::OnResponseHeader(std::string_view name, std::string_view value, bool trailers) {
  if (name == "grpc-status") {
    int code = 0;
    // An answer the router refused (too large) keeps the router's status.
    if (absl::SimpleAtoi(absl::string_view(value.data(), value.size()), &code) &&
        answer_.message.empty()) {
      answer_.code = code;
      upstream_status_ = code;
    }
  } else if (name == ":status") {
    (void)absl::SimpleAtoi(absl::string_view(value.data(), value.size()), &http_status_);
  }
  (trailers ? answer_.trailers : answer_.headers)
      .push_back({std::string(name), std::string(value)});
}

void RelayCall::OnResponseHeaders(bool end_stream, bool trailers) {
  if (kind_ == Kind::kUnary) {
    if (end_stream && !trailers) answer_.trailers_only = true;
    return;
  }
  if (down_ == nullptr) return;
  if (!trailers) {
    StartResponse(answer_.headers, end_stream);
    return;
  }
  down_pipe_.trailers = std::move(answer_.trailers);
  down_pipe_.ended = true;
  Resume(down_, down_id_);
}

void RelayCall::OnResponseData(const uint8_t* data, size_t size) {
  if (kind_ == Kind::kUnary) {
    nghttp2_session_consume(up_->h2->session(), up_id_, size);
    loop_.MarkDirty(up_);
    if (answer_.body.size() + size > kMaxUnaryBytes) {
      answer_.code = static_cast<int>(StatusCode::RESOURCE_EXHAUSTED);
      answer_.message = absl::StrCat("gecd route: answer larger than ", kMaxUnaryBytes, " bytes");
      cancelled_up_ = true;
      nghttp2_submit_rst_stream(up_->h2->session(), NGHTTP2_FLAG_NONE, up_id_, NGHTTP2_CANCEL);
      return;
    }
    answer_.body.append(reinterpret_cast<const char*>(data), size);
    return;
  }
  if (kind_ == Kind::kStream && endpoint_ != nullptr) {
    for (int n = down_messages_.Feed(data, size); n > 0; --n) {
      if (outstanding_ > 0) {
        --outstanding_;
        relay_.endpoints_.CallEnded(*endpoint_, StatusCode::OK);
      }
      relay_.metrics_.StreamMessage(/*to_endpoint=*/false);
    }
  }
  if (down_ == nullptr) {  // nowhere to go: hand the window back now
    nghttp2_session_consume(up_->h2->session(), up_id_, size);
    loop_.MarkDirty(up_);
    return;
  }
  down_pipe_.bytes.append(reinterpret_cast<const char*>(data), size);
  Resume(down_, down_id_);
}

void RelayCall::OnUpClosed(uint32_t error_code, std::string_view why) {
  if (up_ != nullptr) {
    up_->calls.erase(this);
    up_ = nullptr;
  }
  // What the stream's end means for the call, as gRPC would report it.
  int code = kind_ == Kind::kUnary ? answer_.code : upstream_status_;
  std::string message;
  if (code < 0) {
    if (cancelled_up_) {
      code = static_cast<int>(StatusCode::CANCELLED);
    } else if (error_code != NGHTTP2_NO_ERROR || http_status_ == 0) {
      code = static_cast<int>(StatusCode::UNAVAILABLE);
      message = absl::StrCat(
          "gecd route: endpoint ", endpoint_ != nullptr ? endpoint_->address() : "(internal)", ": ",
          why.empty() ? std::string(nghttp2_http2_strerror(error_code)) : std::string(why));
    } else {
      code = static_cast<int>(CodeForHttpStatus(http_status_));
      message = absl::StrCat("gecd route: endpoint ",
                             endpoint_ != nullptr ? endpoint_->address() : "(internal)",
                             " answered HTTP status ", http_status_, " without a grpc-status");
    }
  }
  const auto status = static_cast<StatusCode>(code);

  if (kind_ == Kind::kUnary) {
    if (endpoint_ != nullptr) relay_.endpoints_.CallEnded(*endpoint_, status);
    if (down_ != nullptr) {
      if (answer_.code < 0 || !answer_.message.empty()) {
        answer_.code = code;
        if (answer_.message.empty()) answer_.message = std::move(message);
        answer_.trailers_only = false;
        answer_.headers.clear();  // made up: AnswerStatus writes its own
      }
      if (status == StatusCode::UNAVAILABLE && !retried_ &&
          (!deadline_.has_value() || *deadline_ > Clock::now())) {
        retried_ = true;
        relay_.metrics_.Retried();
        first_answer_ = std::move(answer_);
        std::shared_ptr<Endpoint> previous = std::move(endpoint_);
        Attempt(previous.get());
        return;
      }
      Forward(std::move(answer_));
    }
    MaybeDelete();
    return;
  }

  if (endpoint_ != nullptr) {
    for (; outstanding_ > 0; --outstanding_) relay_.endpoints_.CallEnded(*endpoint_, status);
  }
  if (down_ != nullptr && !final_sent_) {
    if (!response_started_) {
      AnswerStatus(code, message);
    } else if (!down_pipe_.ended) {  // the endpoint's stream broke off before its trailers
      down_pipe_.trailers =
          Headers{{"grpc-status", std::to_string(code)}, {"grpc-message", PercentEncode(message)}};
      down_pipe_.ended = true;
      Resume(down_, down_id_);
    }
    if (kind_ == Kind::kStream) Finished(code);
  }
  MaybeDelete();
}

void RelayCall::StartResponse(const Headers& headers, bool end_stream) {
  response_started_ = true;
  const std::vector<nghttp2_nv> nv = NameValues(headers);
  nghttp2_data_provider provider{};
  provider.source.ptr = this;
  provider.read_callback = &RelayCall::ReadDown;
  nghttp2_submit_response(down_->h2->session(), down_id_, nv.data(), nv.size(),
                          end_stream ? nullptr : &provider);
  if (end_stream) final_sent_ = true;
  loop_.MarkDirty(down_);
}

void RelayCall::AnswerStatus(int code, std::string_view message) {
  Finished(code);
  if (down_ == nullptr || final_sent_) return;
  StartResponse(TrailersOnly(code, message), /*end_stream=*/true);
}

void RelayCall::Forward(Answer answer) {
  if (answer.headers.empty()) {  // the router made the status up
    AnswerStatus(answer.code, answer.message);
    return;
  }
  Finished(answer.code);
  if (down_ == nullptr || final_sent_) return;
  if (answer.trailers_only) {
    StartResponse(answer.headers, /*end_stream=*/true);
    return;
  }
  down_pipe_ = Pipe{.bytes = std::move(answer.body),
                    .at = 0,
                    .ended = true,
                    .trailers = std::move(answer.trailers)};
  StartResponse(answer.headers, /*end_stream=*/false);
}

void RelayCall::Finished(int code) {
  if (finished_ || kind_ == Kind::kOther) return;
  finished_ = true;
  relay_.metrics_.CallFinished(code, std::chrono::duration<double>(Clock::now() - start_).count());
}

void RelayCall::MaybeDelete() {
  if (down_ == nullptr && up_ == nullptr) delete this;
}

ssize_t RelayCall::Take(Pipe& pipe, RelayConnection* from, int32_t from_id, RelayConnection* to,
                        int32_t to_id, uint8_t* buf, size_t length, uint32_t* flags) {
  const size_t n = std::min(length, pipe.size());
  std::memcpy(buf, pipe.bytes.data() + pipe.at, n);
  pipe.at += n;
  if (pipe.at == pipe.bytes.size()) {
    pipe.bytes.clear();
    pipe.at = 0;
  }
  // A unary call's bytes were handed back when they arrived.
  if (n > 0 && from != nullptr && kind_ != Kind::kUnary) {
    nghttp2_session_consume(from->h2->session(), from_id, n);
    loop_.MarkDirty(from);
  }
  if (pipe.size() > 0) return static_cast<ssize_t>(n);
  if (!pipe.ended) return n > 0 ? static_cast<ssize_t>(n) : ssize_t{NGHTTP2_ERR_DEFERRED};
  *flags |= NGHTTP2_DATA_FLAG_EOF;
  if (pipe.trailers.has_value()) {
    *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    const std::vector<nghttp2_nv> nv = NameValues(*pipe.trailers);
    nghttp2_submit_trailer(to->h2->session(), to_id, nv.data(), nv.size());
  }
  if (&pipe == &down_pipe_) final_sent_ = true;
  return static_cast<ssize_t>(n);
}

void RelayCall::Resume(RelayConnection* to, int32_t to_id) {
  nghttp2_session_resume_data(to->h2->session(), to_id);
  loop_.MarkDirty(to);
}

// ---------------------------------------------------------------------------------------------
// nghttp2's callbacks. A session's user data is its RelayConnection; a stream's, its RelayCall.

namespace {

RelayCall* CallOf(nghttp2_session* session, int32_t stream_id) {
  return static_cast<RelayCall*>(nghttp2_session_get_stream_user_data(session, stream_id));
}

std::string_view View(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

int OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
  auto* c = static_cast<RelayConnection*>(user_data);
  if (!c->downstream || frame->hd.type != NGHTTP2_HEADERS ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  auto* call = new RelayCall(*c->loop, c, frame->hd.stream_id);
  nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, call);
  return 0;
}

int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
             size_t name_size, const uint8_t* value, size_t value_size, uint8_t, void* user_data) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  RelayCall* call = CallOf(session, frame->hd.stream_id);
  if (call == nullptr) return 0;
  if (static_cast<RelayConnection*>(user_data)->downstream) {
    // A client's trailers (gRPC sends none) are dropped; their END_STREAM still counts.
    if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      call->OnRequestHeader(View(name, name_size), View(value, value_size));
    }
  } else {
    call->OnResponseHeader(View(name, name_size), View(value, value_size),
                           /*trailers=*/frame->headers.cat == NGHTTP2_HCAT_HEADERS);
  }
  return 0;
}

int OnFrameReceived(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
  auto* c = static_cast<RelayConnection*>(user_data);
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    c->goaway = true;
    return 0;
  }
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  RelayCall* call = CallOf(session, frame->hd.stream_id);
  if (call == nullptr) return 0;
  const bool end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  const bool headers = frame->hd.type == NGHTTP2_HEADERS;
  if (c->downstream) {
    if (headers && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      call->OnRequestHeaders(end_stream);
    } else if (end_stream) {
      call->OnRequestEnd();
    }
  } else if (headers) {
    call->OnResponseHeaders(end_stream, /*trailers=*/frame->headers.cat == NGHTTP2_HCAT_HEADERS);
  }
  return 0;
}

int OnDataChunk(nghttp2_session* session, uint8_t, int32_t stream_id, const uint8_t* data,
                size_t size, void* user_data) {
  RelayCall* call = CallOf(session, stream_id);
  if (call == nullptr) {  // a stream the relay has no call for: take the bytes, drop them
    nghttp2_session_consume(session, stream_id, size);
    return 0;
  }
  if (static_cast<RelayConnection*>(user_data)->downstream) {
    call->OnRequestData(data, size);
  } else {
    call->OnResponseData(data, size);
  }
  return 0;
}

int OnStreamClosed(nghttp2_session* session, int32_t stream_id, uint32_t error_code,
                   void* user_data) {
  RelayCall* call = CallOf(session, stream_id);
  if (call == nullptr) return 0;
  nghttp2_session_set_stream_user_data(session, stream_id, nullptr);
  if (static_cast<RelayConnection*>(user_data)->downstream) {
    call->OnDownClosed();
  } else {
    call->OnUpClosed(error_code, error_code == NGHTTP2_REFUSED_STREAM ? "refused the stream" : "");
  }
  return 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// RelayLoop

RelayLoop::RelayLoop(Relay& relay, int listen_fd)
    : relay_(relay),
      listen_fd_(listen_fd),
      epoll_fd_(epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  nghttp2_session_callbacks_new(&callbacks_);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks_, OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks_, OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks_, OnFrameReceived);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks_, OnDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks_, OnStreamClosed);
  epoll_event listen_event{.events = EPOLLIN, .data = {.ptr = nullptr}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listen_event);
  epoll_event wake_event{.events = EPOLLIN, .data = {.ptr = this}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake_event);
}

RelayLoop::~RelayLoop() {
  nghttp2_session_callbacks_del(callbacks_);
  close(wake_fd_);
  close(epoll_fd_);
  close(listen_fd_);
}

void RelayLoop::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void RelayLoop::Run() {
  epoll_event events[kMaxEvents];
  while (!stopping.load(std::memory_order_relaxed)) {
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, static_cast<int>(kTick.count()));
    for (int i = 0; i < n; ++i) {
      void* ptr = events[i].data.ptr;
      if (ptr == nullptr) {
        Accept();
      } else if (ptr == this) {
        uint64_t count = 0;
        (void)!read(wake_fd_, &count, sizeof count);
      } else {
        OnEvent(static_cast<RelayConnection*>(ptr), events[i].events);
      }
    }
    FlushDirty();
    if (const auto now = Clock::now(); now >= next_tick_) {
      Tick(now);
      next_tick_ = now + kTick;
      FlushDirty();
    }
    Reap();
  }
  // Stopping: tell the clients (GOAWAY, so they open no more streams here), then cut the rest.
  for (auto& [ptr, c] : connections_) {
    if (!c->downstream || c->dead) continue;
    nghttp2_submit_goaway(c->h2->session(), NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(c->h2->session()),
                          NGHTTP2_NO_ERROR, nullptr, 0);
    MarkDirty(c.get());
  }
  FlushDirty();
  // The clients' side first: a call whose client is gone is not retried when its endpoint's
  // connection closes next, so no new connection opens on the way out.
  for (const bool downstream : {true, false}) {
    std::vector<RelayConnection*> doomed;
    for (auto& [ptr, c] : connections_) {
      if (c->downstream == downstream) doomed.push_back(ptr);
    }
    for (RelayConnection* c : doomed) Kill(c, "the router stopped");
  }
  Reap();
}

void RelayLoop::Accept() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        spdlog::warn("route: accept: {}", strerror(errno));
      }
      return;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Adopt(fd, /*downstream=*/true, nullptr, "client");
  }
}

RelayConnection* RelayLoop::Adopt(int fd, bool downstream, std::shared_ptr<Endpoint> endpoint,
                                  std::string peer) {
  auto owned = std::make_unique<RelayConnection>();
  RelayConnection* c = owned.get();
  c->loop = this;
  c->downstream = downstream;
  c->endpoint = std::move(endpoint);
  c->peer = std::move(peer);
  c->h2 = std::make_unique<H2Connection>(
      fd, downstream ? H2Connection::Side::kServer : H2Connection::Side::kClient, callbacks_, c);
  connections_.emplace(c, std::move(owned));
  epoll_event event{.events = EPOLLIN, .data = {.ptr = c}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
  MarkDirty(c);  // its SETTINGS
  return c;
}

absl::StatusOr<RelayConnection*> RelayLoop::Upstream(const std::shared_ptr<Endpoint>& endpoint) {
  Slots& slots = upstreams_[endpoint.get()];
  const size_t n =
      endpoint == nullptr ? 1 : static_cast<size_t>(relay_.options_.connections_per_endpoint);
  if (slots.connections.size() != n) slots.connections.resize(n, nullptr);
  RelayConnection*& c = slots.connections[slots.next++ % n];
  if (c != nullptr && (c->goaway || nghttp2_session_check_request_allowed(c->h2->session()) == 0)) {
    c = nullptr;  // it finishes its streams and closes; new ones go on a new connection
  }
  if (c == nullptr) {
    const std::string& address =
        endpoint == nullptr ? relay_.options_.internal : endpoint->address();
    ASSIGN_OR_RETURN(const int fd, ConnectNonBlocking(address));
    c = Adopt(fd, /*downstream=*/false, endpoint, address);
    c->connecting = true;
    c->connect_deadline = Clock::now() + relay_.options_.connect_timeout;
    Watch(c, /*writable=*/true);
  }
  return c;
}

void RelayLoop::MarkDirty(RelayConnection* c) {
  if (c->dirty || c->dead) return;
  c->dirty = true;
  dirty_.push_back(c);
}

void RelayLoop::OnEvent(RelayConnection* c, uint32_t events) {
  if (c->dead) return;
  if (c->connecting) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
    int error = 0;
    socklen_t size = sizeof error;
    getsockopt(c->h2->fd(), SOL_SOCKET, SO_ERROR, &error, &size);
    if (error != 0) {
      Kill(c, absl::StrCat("connect: ", strerror(error)));
      return;
    }
    c->connecting = false;
    MarkDirty(c);
  }
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
    if (absl::Status read = c->h2->Read(); !read.ok()) {
      Kill(c, std::string(read.message()));
      return;
    }
    c->last_read = Clock::now();
    c->ping_sent.reset();
    MarkDirty(c);  // what the peer said may want an answer (SETTINGS ack, window updates)
  }
  if ((events & EPOLLOUT) != 0) MarkDirty(c);
}

void RelayLoop::FlushDirty() {
  while (!dirty_.empty()) {
    std::vector<RelayConnection*> batch;
    batch.swap(dirty_);
    for (RelayConnection* c : batch) {
      c->dirty = false;
      if (c->dead || c->connecting) continue;
      absl::StatusOr<bool> more = c->h2->Flush();
      if (!more.ok()) {
        Kill(c, std::string(more.status().message()));
        continue;
      }
      Watch(c, *more);
      if (c->h2->Over()) Kill(c, "closed");
    }
  }
}

void RelayLoop::Watch(RelayConnection* c, bool writable) {
  if (c->writable_wait == writable) return;
  c->writable_wait = writable;
  epoll_event event{.events = EPOLLIN | (writable ? EPOLLOUT : 0u), .data = {.ptr = c}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->h2->fd(), &event);
}

void RelayLoop::Kill(RelayConnection* c, std::string_view why) {
  if (c->dead) return;
  c->dead = true;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->h2->fd(), nullptr);
  if (!c->downstream) {
    if (auto it = upstreams_.find(c->endpoint.get()); it != upstreams_.end()) {
      std::replace(it->second.connections.begin(), it->second.connections.end(), c,
                   static_cast<RelayConnection*>(nullptr));
    }
    if (!c->calls.empty()) {
      spdlog::debug("route: connection to {} lost with {} streams: {}", c->peer, c->calls.size(),
                    why);
    }
  }
  const std::vector<RelayCall*> calls(c->calls.begin(), c->calls.end());
  const std::string reason(why);
  for (RelayCall* call : calls) {
    if (c->downstream) {
      call->OnDownClosed();
    } else {
      call->OnUpClosed(NGHTTP2_CONNECT_ERROR, reason);
    }
  }
  dead_.push_back(c);
}

void RelayLoop::Reap() {
  for (RelayConnection* c : dead_) connections_.erase(c);
  dead_.clear();
}

void RelayLoop::Tick(Clock::time_point now) {
  const Relay::Options& options = relay_.options_;
  std::vector<std::pair<RelayConnection*, const char*>> doomed;
  for (auto& [ptr, c] : connections_) {
    if (c->dead || c->downstream) continue;
    if (c->connecting && now >= c->connect_deadline) {
      doomed.emplace_back(ptr, "connect timed out");
    } else if (c->calls.empty() &&
               (c->goaway || (c->endpoint != nullptr && c->endpoint->removed.load()))) {
      doomed.emplace_back(ptr, "no longer needed");
    } else if (c->h2->Over()) {
      doomed.emplace_back(ptr, "closed");
    } else if (c->ping_sent.has_value() && now - *c->ping_sent >= options.keepalive_timeout) {
      doomed.emplace_back(ptr, "no answer to a keepalive PING");
    } else if (!c->ping_sent.has_value() && now - c->last_read >= options.keepalive_time &&
               std::any_of(c->calls.begin(), c->calls.end(),
                           [](const RelayCall* call) { return call->unary(); })) {
      nghttp2_submit_ping(c->h2->session(), NGHTTP2_FLAG_NONE, nullptr);
      c->ping_sent = now;
      MarkDirty(c.get());
    }
  }
  for (auto [c, why] : doomed) Kill(c, why);
  std::erase_if(upstreams_, [](const auto& entry) {
    const auto& slots = entry.second.connections;
    return std::all_of(slots.begin(), slots.end(), [](auto* c) { return c == nullptr; });
  });
}

// ---------------------------------------------------------------------------------------------
// Relay

Relay::Relay(Options options, EndpointSet& endpoints, RouteMetrics& metrics)
    : options_(std::move(options)), endpoints_(endpoints), metrics_(metrics) {}

absl::StatusOr<std::unique_ptr<Relay>> Relay::Start(Options options, EndpointSet& endpoints,
                                                    RouteMetrics& metrics) {
  ASSIGN_OR_RETURN(server::ListenAddress listen,
                   server::ParseListenAddress(options.listen, "route.listen"));
  std::unique_ptr<Relay> relay(new Relay(std::move(options), endpoints, metrics));
  const int threads = std::max(1, relay->options_.threads);
  for (int i = 0; i < threads; ++i) {
    ASSIGN_OR_RETURN(server::AddressList addresses, server::ResolveListenAddress(listen));
    const addrinfo* a = addresses.get();
    const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (fd < 0 || bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 4096) != 0) {
      const int error = errno;
      if (fd >= 0) close(fd);
      return absl::UnavailableError(absl::StrCat("cannot listen on ", relay->options_.listen,
                                                 " (route.listen): ", strerror(error)));
    }
    if (listen.port == 0) {  // the other threads share the port the first one got
      sockaddr_storage bound{};
      socklen_t size = sizeof bound;
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size);
      listen.port =
          ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
    relay->loops_.push_back(std::make_unique<RelayLoop>(*relay, fd));
  }
  relay->port_ = listen.port;
  for (auto& loop : relay->loops_) {
    relay->threads_.emplace_back([l = loop.get()] { l->Run(); });
  }
  return relay;
}

Relay::~Relay() { Stop(); }

std::chrono::steady_clock::time_point Relay::last_arrival() const {
  return Clock::time_point(Clock::duration(last_arrival_.load(std::memory_order_relaxed)));
}

bool Relay::Admit() {
  if (in_flight_.fetch_add(1, std::memory_order_relaxed) < options_.max_in_flight) return true;
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  metrics_.Shed();
  return false;
}

void Relay::Stop() {
  for (auto& loop : loops_) {
    loop->stopping.store(true);
    loop->Wake();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  loops_.clear();
}

}  // namespace gecd::route
