#ifndef GECD_ROUTE_H2_CONNECTION_H_
#define GECD_ROUTE_H2_CONNECTION_H_

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// One HTTP/2 connection of the relay, either side of it: a non-blocking socket and the nghttp2
// session framing it, with the bytes nghttp2 framed that the socket has not taken yet. Owns the
// fd and the session. Not thread-safe: a connection lives on one relay thread.
namespace gecd::route {

struct Header {
  std::string name;
  std::string value;
};
using Headers = std::vector<Header>;

// nghttp2's view of `headers` (it copies them when a frame is submitted).
std::vector<nghttp2_nv> NameValues(const Headers& headers);

class H2Connection {
 public:
  enum class Side { kServer, kClient };

  // Takes `fd` (non-blocking). `user_data` reaches every callback.
  H2Connection(int fd, Side side, const nghttp2_session_callbacks* callbacks, void* user_data);
  ~H2Connection();
  H2Connection(const H2Connection&) = delete;
  H2Connection& operator=(const H2Connection&) = delete;

  int fd() const { return fd_; }
  nghttp2_session* session() const { return session_; }

  // Reads what the socket has and feeds it to the session (whose callbacks run meanwhile).
  // An error names what failed: the peer closed, a socket error, an HTTP/2 protocol error.
  absl::Status Read();
  // Frames what the session has queued and writes what the socket takes. True while bytes are
  // left over (write when the socket is writable again).
  absl::StatusOr<bool> Flush();
  // Neither side has anything more to say: the connection can close.
  bool Over() const;

 private:
  const int fd_;
  nghttp2_session* session_ = nullptr;
  std::string out_;    // framed, not yet written
  size_t out_at_ = 0;  // written so far of out_
};

// Connects a non-blocking socket to `address` ("host:port", "[v6]:port"); the connect is in
// progress when this returns (done when the fd turns writable; SO_ERROR says how).
absl::StatusOr<int> ConnectNonBlocking(std::string_view address);

}  // namespace gecd::route

#endif  // GECD_ROUTE_H2_CONNECTION_H_
