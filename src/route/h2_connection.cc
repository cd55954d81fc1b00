#include "route/h2_connection.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/listen_address.h"

namespace gecd::route {
namespace {

// What one Read takes from the socket before the session gets to answer: enough for a burst of
// small calls, small enough that one busy connection does not starve the others on its thread.
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kReadsPerWake = 4;
// Frames are gathered up to this before a write, so many small frames go in one syscall.
constexpr size_t kWriteBatch = 256 * 1024;

}  // namespace

std::vector<nghttp2_nv> NameValues(const Headers& headers) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(headers.size());
  for (const Header& h : headers) {
    nv.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(h.name.data())),
                  reinterpret_cast<uint8_t*>(const_cast<char*>(h.value.data())), h.name.size(),
                  h.value.size(), NGHTTP2_NV_FLAG_NONE});
  }
  return nv;
}

H2Connection::H2Connection(int fd, Side side, const nghttp2_session_callbacks* callbacks,
                           void* user_data, std::unique_ptr<tls::TlsSocket> tls)
    : fd_(fd), tls_(std::move(tls)) {
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  // The relay hands window back only when the other side has taken the bytes, so a slow reader
  // slows its writer instead of filling the router's memory.
  nghttp2_option_set_no_auto_window_update(option, 1);
  if (side == Side::kServer) {
    nghttp2_session_server_new2(&session_, callbacks, user_data, option);
  } else {
    nghttp2_session_client_new2(&session_, callbacks, user_data, option);
  }
  nghttp2_option_del(option);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1u << 16},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 20},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, 16 << 20);
}

H2Connection::~H2Connection() {
  nghttp2_session_del(session_);
  tls_.reset();  // before its socket closes
  close(fd_);
}

absl::StatusOr<ssize_t> H2Connection::ReadSome(uint8_t* buffer, size_t size) {
  if (tls_ != nullptr) {
    absl::StatusOr<ssize_t> n = tls_->Read(buffer, size);
    read_wants_write_ = n.ok() && *n == tls::TlsSocket::kWouldBlock && tls_->wants_write();
    return n;
  }
  for (;;) {
    const ssize_t n = read(fd_, buffer, size);
    if (n >= 0) return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return tls::TlsSocket::kWouldBlock;
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat("read: ", strerror(errno)));
  }
}

absl::StatusOr<ssize_t> H2Connection::WriteSome(const char* data, size_t size) {
  if (tls_ != nullptr) return tls_->Write(reinterpret_cast<const uint8_t*>(data), size);
  for (;;) {
    const ssize_t n = send(fd_, data, size, MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return tls::TlsSocket::kWouldBlock;
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat("write: ", strerror(errno)));
  }
}

absl::Status H2Connection::Handshake() {
  if (!handshaking()) return absl::OkStatus();
  return tls_->Handshake();
}

absl::Status H2Connection::Read() {
  RETURN_IF_ERROR(Handshake());
  if (handshaking()) return absl::OkStatus();
  uint8_t buffer[kReadChunk];
  for (int i = 0; i < kReadsPerWake; ++i) {
    ASSIGN_OR_RETURN(const ssize_t n, ReadSome(buffer, sizeof buffer));
    if (n == 0) return absl::UnavailableError("the peer closed the connection");
    if (n == tls::TlsSocket::kWouldBlock) return absl::OkStatus();
    const ssize_t parsed = nghttp2_session_mem_recv(session_, buffer, static_cast<size_t>(n));
    if (parsed < 0) {
      return absl::UnavailableError(
          absl::StrCat("HTTP/2: ", nghttp2_strerror(static_cast<int>(parsed))));
    }
    // A short plaintext read emptied the socket; TLS reads a record at a time.
    if (tls_ == nullptr && static_cast<size_t>(n) < sizeof buffer) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> H2Connection::Flush() {
  RETURN_IF_ERROR(Handshake());
  if (handshaking()) return tls_->wants_write();
  for (;;) {
    if (out_at_ == out_.size()) {
      out_.clear();
      out_at_ = 0;
      while (out_.size() < kWriteBatch) {
        const uint8_t* data = nullptr;
        const ssize_t n = nghttp2_session_mem_send(session_, &data);
        if (n < 0) {
          return absl::UnavailableError(
              absl::StrCat("HTTP/2: ", nghttp2_strerror(static_cast<int>(n))));
        }
        if (n == 0) break;
        out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
      }
      if (out_.empty()) return read_wants_write_;
    }
    ASSIGN_OR_RETURN(const ssize_t n, WriteSome(out_.data() + out_at_, out_.size() - out_at_));
    if (n == tls::TlsSocket::kWouldBlock) {
      // A TLS write may wait for the peer's bytes instead (the next read flushes again).
      return tls_ == nullptr || tls_->wants_write() || read_wants_write_;
    }
    out_at_ += static_cast<size_t>(n);
  }
}

bool H2Connection::Over() const {
  return out_at_ == out_.size() && nghttp2_session_want_read(session_) == 0 &&
         nghttp2_session_want_write(session_) == 0;
}

absl::StatusOr<int> ConnectNonBlocking(std::string_view address) {
  ASSIGN_OR_RETURN(const daemon::ListenAddress a, daemon::ParseListenAddress(address, "endpoint"));
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(a.port);
  if (const int rc = getaddrinfo(a.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("resolve ", std::string(address), ": ", gai_strerror(rc)));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(found);
    return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int rc = connect(fd, found->ai_addr, found->ai_addrlen);
  const int error = errno;
  freeaddrinfo(found);
  if (rc != 0 && error != EINPROGRESS) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect ", std::string(address), ": ", strerror(error)));
  }
  return fd;
}

}  // namespace gecd::route
