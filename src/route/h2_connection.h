#ifndef GECD_ROUTE_H2_CONNECTION_H_
#define GECD_ROUTE_H2_CONNECTION_H_

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tls/tls_socket.h"

// One HTTP/2 connection of the relay, either side of it: a non-blocking socket, its TLS session
// when it has one (the handshake first, then the frames go through it), and the nghttp2 session
// framing it, with the bytes nghttp2 framed that the socket has not taken yet. Owns the fd, the
// TLS session and the nghttp2 session. Not thread-safe: a connection lives on one relay thread.
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

  // Takes `fd` (non-blocking) and `tls` (over `fd`; null: plaintext). `user_data` reaches every
  // callback.
  H2Connection(int fd, Side side, const nghttp2_session_callbacks* callbacks, void* user_data,
               std::unique_ptr<tls::TlsSocket> tls = nullptr);
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
  // The TLS handshake is not done yet (Read and Flush move it on; no frame moves until it is).
  bool handshaking() const { return tls_ != nullptr && !tls_->established(); }
  // TLS: the last Read stopped until the socket takes bytes (call Read when it is writable).
  bool read_wants_write() const { return read_wants_write_; }

 private:
  // read(2) and send(2), through TLS when there is one: bytes moved, 0 (the peer closed; reads
  // only) or tls::TlsSocket::kWouldBlock.
  absl::StatusOr<ssize_t> ReadSome(uint8_t* buffer, size_t size);
  absl::StatusOr<ssize_t> WriteSome(const char* data, size_t size);
  // Moves a TLS handshake on: OK with handshaking() false once it is done.
  absl::Status Handshake();

  const int fd_;
  std::unique_ptr<tls::TlsSocket> tls_;
  bool read_wants_write_ = false;
  nghttp2_session* session_ = nullptr;
  std::string out_;    // framed, not yet written
  size_t out_at_ = 0;  // written so far of out_
};

// Connects a non-blocking socket to `address` ("host:port", "[v6]:port"); the connect is in
// progress when this returns (done when the fd turns writable; SO_ERROR says how).
absl::StatusOr<int> ConnectNonBlocking(std::string_view address);

}  // namespace gecd::route

#endif  // GECD_ROUTE_H2_CONNECTION_H_
