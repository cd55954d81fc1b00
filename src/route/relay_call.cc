#include "route/relay_call.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "route/relay_loop.h"

namespace gecd::route {
namespace {

using grpc::StatusCode;

constexpr std::string_view kCorrectPath = "/gecd.v1.GrammarCorrection/Correct";
constexpr std::string_view kCorrectStreamPath = "/gecd.v1.GrammarCorrection/CorrectStream";
// gRPC's default receive limit: a client would refuse a larger answer anyway, and it bounds
// what a unary call (read whole, for the retry) holds in the router.
constexpr size_t kMaxUnaryBytes = 4 << 20;

}  // namespace

RelayCall::RelayCall(RelayLoop& loop, RelayConnection* down, int32_t id)
    : loop_(loop), relay_(loop.relay()), down_(down), down_id_(id) {
  down_->calls.insert(this);
}

RelayCall::~RelayCall() {
  if (admitted_) relay_.Release();
}

ssize_t RelayCall::ReadUp(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                          nghttp2_data_source* source, void*) {
  auto* call = static_cast<RelayCall*>(source->ptr);
  return call->Take(call->up_pipe_, call->down_, call->down_id_, call->up_, call->up_id_, buf,
                    length, flags);
}

ssize_t RelayCall::ReadDown(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                            nghttp2_data_source* source, void*) {
  auto* call = static_cast<RelayCall*>(source->ptr);
  return call->Take(call->down_pipe_, call->up_, call->up_id_, call->down_, call->down_id_, buf,
                    length, flags);
}

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
    Consume(down_, down_id_, size);
    if (request_.size() + size > kMaxUnaryBytes) {
      request_too_big_ = true;
      request_.clear();
    }
    if (!request_too_big_) request_.append(reinterpret_cast<const char*>(data), size);
    return;
  }
  if (up_ == nullptr) {  // answered already: the bytes have nowhere to go
    Consume(down_, down_id_, size);
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
  if (relay_.options_.tokens != nullptr) {
    std::string_view authorization;
    for (const Header& h : request_headers_) {
      if (h.name == "authorization") authorization = h.value;
    }
    absl::StatusOr<std::string> client = relay_.options_.tokens->Authenticate(authorization);
    if (!client.ok()) {
      AnswerStatus(static_cast<int>(StatusCode::UNAUTHENTICATED),
                   absl::StrCat("gecd route: ", std::string(client.status().message())));
      return;
    }
    client_ = *std::move(client);
  }
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
  answer_ = RelayAnswer{};
  if (kind_ == Kind::kUnary) endpoint_->CallStarted();
  absl::StatusOr<RelayConnection*> up = loop_.Upstream(endpoint_);
  if (up.ok() && kind_ == Kind::kUnary) {
    up_pipe_ = RelayPipe{.bytes = request_, .at = 0, .ended = true, .trailers = std::nullopt};
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
    Consume(up_, up_id_, size);
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
    int sentence_answers = 0;
    const int messages = down_messages_.Feed(data, size, &sentence_answers);
    for (int n = messages - sentence_answers; n > 0; --n) {
      if (outstanding_ > 0) {
        --outstanding_;
        relay_.endpoints_.CallEnded(*endpoint_, StatusCode::OK);
      }
    }
    for (int n = messages; n > 0; --n) relay_.metrics_.StreamMessage(/*to_endpoint=*/false);
  }
  if (down_ == nullptr) {  // nowhere to go: hand the window back now
    Consume(up_, up_id_, size);
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

void RelayCall::Forward(RelayAnswer answer) {
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
  down_pipe_ = RelayPipe{.bytes = std::move(answer.body),
                         .at = 0,
                         .ended = true,
                         .trailers = std::move(answer.trailers)};
  StartResponse(answer.headers, /*end_stream=*/false);
}

void RelayCall::Finished(int code) {
  if (finished_ || kind_ == Kind::kOther) return;
  finished_ = true;
  relay_.metrics_.CallFinished(code, std::chrono::duration<double>(Clock::now() - start_).count());
  if (!client_.empty()) relay_.metrics_.ClientCallFinished(client_, code);
}

void RelayCall::MaybeDelete() {
  if (down_ == nullptr && up_ == nullptr) delete this;
}

ssize_t RelayCall::Take(RelayPipe& pipe, RelayConnection* from, int32_t from_id,
                        RelayConnection* to, int32_t to_id, uint8_t* buf, size_t length,
                        uint32_t* flags) {
  const size_t n = std::min(length, pipe.size());
  std::memcpy(buf, pipe.bytes.data() + pipe.at, n);
  pipe.at += n;
  if (pipe.at == pipe.bytes.size()) {
    pipe.bytes.clear();
    pipe.at = 0;
  }
  // A unary call's bytes were handed back when they arrived.
  if (n > 0 && from != nullptr && kind_ != Kind::kUnary) {
    Consume(from, from_id, n);
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

void RelayCall::Consume(RelayConnection* c, int32_t id, size_t size) {
  nghttp2_session_consume(c->h2->session(), id, size);
  loop_.MarkDirty(c);
}

}  // namespace gecd::route
