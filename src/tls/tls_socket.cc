#include "tls/tls_socket.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gecd::tls {
namespace {

bool IsIpAddress(const std::string& name) {
  unsigned char address[sizeof(in6_addr)];
  return inet_pton(AF_INET, name.c_str(), address) == 1 ||
         inet_pton(AF_INET6, name.c_str(), address) == 1;
}

// OpenSSL's socket BIO, but writing with send(MSG_NOSIGNAL): a peer gone mid-write is an
// error, not a SIGPIPE that ends a process which has not ignored it.
int SendNoSignal(BIO* bio, const char* data, int size) {
  const int fd = static_cast<int>(BIO_get_fd(bio, nullptr));
  errno = 0;
  const ssize_t n = send(fd, data, static_cast<size_t>(size), MSG_NOSIGNAL);
  BIO_clear_retry_flags(bio);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_write(bio);
  }
  return static_cast<int>(n);
}

const BIO_METHOD* SocketWithoutSigpipe() {
  static const BIO_METHOD* const method = [] {
    const BIO_METHOD* socket = BIO_s_socket();
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "gecd socket");
    BIO_meth_set_write(m, SendNoSignal);
    BIO_meth_set_read(m, BIO_meth_get_read(socket));
    BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(socket));
    BIO_meth_set_create(m, BIO_meth_get_create(socket));
    BIO_meth_set_destroy(m, BIO_meth_get_destroy(socket));
    return m;
  }();
  return method;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsSocket>> TlsSocket::Create(const SslContext& context, int fd,
                                                             Side side,
                                                             const std::string& peer_name) {
  SSL* ssl = SSL_new(context.get());
  if (ssl == nullptr) return absl::InternalError(absl::StrCat("tls: ", SslErrorText("SSL_new")));
  std::unique_ptr<TlsSocket> socket(new TlsSocket(ssl));
  BIO* bio = BIO_new(SocketWithoutSigpipe());
  if (bio == nullptr) return absl::InternalError(absl::StrCat("tls: ", SslErrorText("BIO_new")));
  BIO_set_fd(bio, fd, BIO_NOCLOSE);
  SSL_set_bio(ssl, bio, bio);  // the SSL owns it now
  if (side == Side::kServer) {
    SSL_set_accept_state(ssl);
    return socket;
  }
  SSL_set_connect_state(ssl);
  if (!peer_name.empty()) {
    const bool ip = IsIpAddress(peer_name);
    if (!ip) SSL_set_tlsext_host_name(ssl, peer_name.c_str());
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    const int set = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, peer_name.c_str())
                       : X509_VERIFY_PARAM_set1_host(param, peer_name.c_str(), 0);
    if (set != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("tls: cannot verify the name ", peer_name, ": ", SslErrorText("invalid")));
    }
  }
  return socket;
}

TlsSocket::~TlsSocket() { SSL_free(ssl_); }

absl::StatusOr<ssize_t> TlsSocket::Outcome(int result, const char* what) {
  const int error = SSL_get_error(ssl_, result);
  switch (error) {
    case SSL_ERROR_WANT_READ:
      return kWouldBlock;
    case SSL_ERROR_WANT_WRITE:
      wants_write_ = true;
      return kWouldBlock;
    case SSL_ERROR_ZERO_RETURN:
      return 0;
    case SSL_ERROR_SYSCALL: {
      const int saved = errno;
      ERR_clear_error();
      if (saved == 0 || saved == ECONNRESET || saved == EPIPE) {
        return absl::UnavailableError(
            absl::StrCat("TLS ", what, ": the peer closed the connection"));
      }
      return absl::UnavailableError(absl::StrCat("TLS ", what, ": ", std::strerror(saved)));
    }
    default:
      break;
  }
  std::string reason = SslErrorText("failed");
  if (const long verify = SSL_get_verify_result(ssl_); verify != X509_V_OK && !established_) {
    reason = absl::StrCat(reason, " (", X509_verify_cert_error_string(verify), ")");
  }
  return absl::UnavailableError(absl::StrCat("TLS ", what, ": ", reason));
}

absl::Status TlsSocket::Handshake() {
  if (established_) return absl::OkStatus();
  wants_write_ = false;
  ERR_clear_error();
  const int result = SSL_do_handshake(ssl_);
  if (result == 1) {
    established_ = true;
    return absl::OkStatus();
  }
  absl::StatusOr<ssize_t> outcome = Outcome(result, "handshake");
  if (!outcome.ok()) return outcome.status();
  if (*outcome == 0) return absl::UnavailableError("TLS handshake: the peer closed the connection");
  return absl::OkStatus();
}

absl::StatusOr<ssize_t> TlsSocket::Read(uint8_t* buffer, size_t size) {
  wants_write_ = false;
  ERR_clear_error();
  const int n = SSL_read(ssl_, buffer, static_cast<int>(size));
  if (n > 0) return n;
  return Outcome(n, "read");
}

absl::StatusOr<ssize_t> TlsSocket::Write(const uint8_t* data, size_t size) {
  wants_write_ = false;
  ERR_clear_error();
  const int n = SSL_write(ssl_, data, static_cast<int>(size));
  if (n > 0) return n;
  absl::StatusOr<ssize_t> outcome = Outcome(n, "write");
  if (outcome.ok() && *outcome == 0) {
    return absl::UnavailableError("TLS write: the peer closed the connection");
  }
  return outcome;
}

}  // namespace gecd::tls
