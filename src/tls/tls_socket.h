#ifndef GECD_TLS_TLS_SOCKET_H_
#define GECD_TLS_TLS_SOCKET_H_

#include <openssl/ssl.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tls/ssl_context.h"

// One TLS session (OpenSSL) over a connected non-blocking socket, either side: the handshake,
// then reads and writes with the shape of read(2) and send(2) on a non-blocking socket. Owns
// the SSL (which holds its own reference to the context it was made from, so a rotation never
// pulls a context from under an open connection); the fd stays its caller's. Not thread-safe:
// a connection lives on one thread.
namespace gecd::tls {

class TlsSocket {
 public:
  enum class Side { kServer, kClient };
  // Read and Write: nothing can move until the socket is ready (wants_write() says which way).
  static constexpr ssize_t kWouldBlock = -1;

  // `peer_name`, client only: sent as SNI (unless an IP address) and the name the server's
  // certificate must carry (an IP address is matched as one). Server: "".
  static absl::StatusOr<std::unique_ptr<TlsSocket>> Create(const SslContext& context, int fd,
                                                           Side side, const std::string& peer_name);
  ~TlsSocket();
  TlsSocket(const TlsSocket&) = delete;
  TlsSocket& operator=(const TlsSocket&) = delete;

  // Moves the handshake on. OK while it is under way or done (established() says which); an
  // error says why it failed (the peer's certificate, a plaintext peer, the protocol).
  absl::Status Handshake();
  bool established() const { return established_; }
  // Bytes read (> 0), 0 when the peer closed, or kWouldBlock.
  absl::StatusOr<ssize_t> Read(uint8_t* buffer, size_t size);
  // Bytes written (> 0), or kWouldBlock. Retried with the same bytes after kWouldBlock.
  absl::StatusOr<ssize_t> Write(const uint8_t* data, size_t size);
  // The last call that could not go on waits for the socket to take bytes, not to bring some.
  bool wants_write() const { return wants_write_; }

 private:
  explicit TlsSocket(SSL* ssl) : ssl_(ssl) {}
  // What an SSL call's `result` means: kWouldBlock, 0 (closed) or an error.
  absl::StatusOr<ssize_t> Outcome(int result, const char* what);

  SSL* const ssl_;
  bool established_ = false;
  bool wants_write_ = false;
};

}  // namespace gecd::tls

#endif  // GECD_TLS_TLS_SOCKET_H_
