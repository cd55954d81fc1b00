#include "route/relay_session_callbacks.h"

#include <string_view>

#include "route/relay_call.h"
#include "route/relay_connection.h"

namespace gecd::route {
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

nghttp2_session_callbacks* NewRelaySessionCallbacks() {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, OnFrameReceived);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, OnDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, OnStreamClosed);
  return callbacks;
}

}  // namespace gecd::route
