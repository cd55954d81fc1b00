#include "daemon/status_http.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bound_port.h"
#include "common/status_macros.h"
#include "daemon/listen_address.h"
#include "spdlog/spdlog.h"

namespace gecd::daemon {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kPrometheusType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr char kTextType[] = "text/plain";

// gecd's TLS policy in GnuTLS's words, as tls/ssl_context.h has it in OpenSSL's: TLS 1.3 and
// 1.2; in TLS 1.2 only ECDHE key exchange and AEAD ciphers (TLS 1.3's suites are all AEAD).
constexpr char kTlsPriorities[] =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:-CIPHER-ALL:"
    "+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305:-MAC-ALL:+AEAD";

// How long the accept thread waits before trying again when the process is out of file
// descriptors (the connection stays in the backlog meanwhile).
constexpr std::chrono::milliseconds kAcceptBackoff{100};
// Connections accepted in a row before the accept thread looks at its other work (a stop, a
// drained daemon), so that a flood of connections cannot hold it off.
constexpr int kAcceptBatch = 64;

struct Answer {
  unsigned status;
  std::string body;
  const char* content_type = kTextType;
};

Answer Route(const StatusHttpServer::Handlers& handlers, std::string_view path) {
  if (path == "/metrics") return {MHD_HTTP_OK, handlers.metrics(), kPrometheusType};
  if (path == "/healthz") return {MHD_HTTP_OK, "ok\n"};
  if (path == "/readyz") {
    return handlers.ready() ? Answer{MHD_HTTP_OK, "ready\n"}
                            : Answer{MHD_HTTP_SERVICE_UNAVAILABLE, "not ready\n"};
  }
  return {MHD_HTTP_NOT_FOUND, "not found\n"};
}

// Why the client certificate of `connection` (a TLS one, with client CAs) is refused, or ""
// when the request may be served: none while `required`, or one that does not verify against
// the daemon's client CAs for client use (gnutls_certificate_verify_peers: the chain, the
// validity dates, the extended key usage when the certificate has one).
std::string ClientCertificateRefusal(MHD_Connection* connection, bool required) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (info == nullptr || info->tls_session == nullptr) return "no TLS session";
  const auto session = static_cast<gnutls_session_t>(info->tls_session);
  unsigned int count = 0;
  if (gnutls_certificate_get_peers(session, &count) == nullptr || count == 0) {
    return required ? "no client certificate" : "";
  }
  gnutls_typed_vdata_st purpose{};
  purpose.type = GNUTLS_DT_KEY_PURPOSE_OID;
  purpose.data = reinterpret_cast<unsigned char*>(const_cast<char*>(GNUTLS_KP_TLS_WWW_CLIENT));
  unsigned int status = 0;
  if (const int e = gnutls_certificate_verify_peers(session, &purpose, 1, &status); e < 0) {
    return gnutls_strerror(e);
  }
  if (status == 0) return "";
  gnutls_datum_t text{};
  if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text, 0) < 0) {
    return "the client certificate does not verify";
  }
  std::string reason(reinterpret_cast<const char*>(text.data), text.size);
  gnutls_free(text.data);
  return reason;
}

// While a daemon starts on this thread, where libmicrohttpd's messages go: the reason for the
// error if the start fails.
thread_local std::string* start_messages = nullptr;

// libmicrohttpd's messages (a refused connection at the limit, a client's malformed request, a
// failed handshake): debug only, since a flood of bad clients would otherwise flood the log.
void OnMhdLog(void* /*cls*/, const char* format, va_list args) {
  char line[512];
  std::vsnprintf(line, sizeof(line), format, args);
  std::string_view text(line);
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (start_messages != nullptr) {
    if (!start_messages->empty()) start_messages->append("; ");
    start_messages->append(text);
  }
  spdlog::debug("metrics http: {}", text);
}

// A listening socket on the first of `host`'s addresses that binds (IPv6 ones dual-stack, as
// "[::]:port" serves IPv4 too), or an error naming `key`, `listen` and the reason.
absl::StatusOr<int> Listen(const std::string& listen, std::string_view key,
                           const ListenAddress& address) {
  const std::string prefix = absl::StrCat(std::string(key), ": cannot listen on ", listen, ": ");
  absl::StatusOr<AddressList> found = ResolveListenAddress(address);
  if (!found.ok()) return absl::UnavailableError(absl::StrCat(prefix, found.status().message()));
  int error = 0;
  int fd = -1;
  for (addrinfo* ai = found->get(); ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    const int yes = 1, no = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));  // restart over TIME_WAIT
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        ::listen(fd, StatusHttpServer::kListenBacklog) != 0) {
      error = errno;
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) return absl::UnavailableError(absl::StrCat(prefix, std::strerror(error)));
  return fd;
}

}  // namespace

// One libmicrohttpd daemon: its thread serves the connections the accept thread hands it.
struct StatusHttpServer::Daemon {
  Daemon(StatusHttpServer& server, std::optional<Certificate> certificate)
      : server(server), certificate(std::move(certificate)) {}
  ~Daemon() { MHD_stop_daemon(mhd); }  // closes its connections, joins its thread
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // libmicrohttpd's request callback, on its thread: first with the headers, then with each
  // piece of a body, and a last time once the request is complete. A GET is answered on the
  // last call: answered earlier, MHD closes the connection (no keep-alive) or, with a body
  // still unread, sends nothing. A body, which none of the paths takes, is read and dropped.
  // Another method, and a refused client certificate, are answered at once (MHD then closes
  // the connection).
  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char* /*version*/,
                              const char* /*upload_data*/, size_t* upload_data_size,
                              void** request_state) {
    const Daemon& self = *static_cast<const Daemon*>(cls);
    const std::string_view m(method);
    const bool known_method = m == MHD_HTTP_METHOD_GET || m == MHD_HTTP_METHOD_HEAD;
    Answer answer{MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n"};
    std::string refusal;
    if (*request_state == nullptr && self.certificate && !self.certificate->client_ca.empty()) {
      refusal = ClientCertificateRefusal(connection, self.server.require_client_cert_);
    }
    if (!refusal.empty()) {
      spdlog::debug("metrics https: refused: {}", refusal);
      answer = {MHD_HTTP_FORBIDDEN, "client certificate refused\n"};
    } else if (known_method && *request_state == nullptr) {
      *request_state = connection;  // any non-null marker: headers seen
      return MHD_YES;
    } else if (known_method && *upload_data_size != 0) {
      *upload_data_size = 0;
      return MHD_YES;
    } else if (known_method) {
      answer = Route(self.server.handlers_, url);
    }
    MHD_Response* response = MHD_create_response_from_buffer(
        answer.body.size(), const_cast<char*>(answer.body.data()), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) return MHD_NO;  // out of memory: MHD closes the connection
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, answer.content_type);
    if (answer.status == MHD_HTTP_METHOD_NOT_ALLOWED) {
      MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    }
    // A retired daemon's connections end with the request they are on.
    if (self.retired.load()) MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    const MHD_Result queued = MHD_queue_response(connection, answer.status, response);
    MHD_destroy_response(response);
    return queued;
  }

  // libmicrohttpd's connection callback, on its thread: counts the connections down as they
  // close, and wakes the accept thread when a retired daemon has none left.
  static void OnConnection(void* cls, MHD_Connection* /*connection*/, void** /*socket_context*/,
                           MHD_ConnectionNotificationCode code) {
    Daemon& self = *static_cast<Daemon*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED && self.open.fetch_sub(1) == 1 &&
        self.retired.load()) {
      self.server.Wake();
    }
  }

  StatusHttpServer& server;
  // What it serves over TLS (none: plain HTTP). libmicrohttpd keeps pointers to these strings.
  const std::optional<Certificate> certificate;
  MHD_Daemon* mhd = nullptr;
  // Connections handed to it (by the accept thread, before MHD_add_connection) and not closed.
  std::atomic<int> open{0};
  // Replaced by a newer daemon: no new connections, and answers close theirs.
  std::atomic<bool> retired{false};
};

StatusHttpServer::StatusHttpServer(Handlers handlers, std::optional<Https> https)
    : handlers_(std::move(handlers)),
      https_(https.has_value()),
      require_client_cert_(https && https->require_client_cert) {}

absl::StatusOr<std::unique_ptr<StatusHttpServer>> StatusHttpServer::Start(
    const std::string& listen, Handlers handlers, std::optional<Https> https,
    std::string_view listen_key) {
  ASSIGN_OR_RETURN(const ListenAddress address, ParseListenAddress(listen, listen_key));
  std::optional<Certificate> certificate;
  if (https) certificate = https->certificate;
  std::unique_ptr<StatusHttpServer> s(new StatusHttpServer(std::move(handlers), std::move(https)));
  ASSIGN_OR_RETURN(s->listen_fd_, Listen(listen, listen_key, address));
  s->port_ = BoundPort(s->listen_fd_);
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat(std::string(listen_key), ": cannot serve ", listen,
                                            ": eventfd: ", std::strerror(errno)));
  }
  absl::StatusOr<std::unique_ptr<Daemon>> first = s->StartDaemon(std::move(certificate));
  if (!first.ok()) {
    return absl::Status(first.status().code(),
                        absl::StrCat(std::string(listen_key), ": cannot serve ", listen, ": ",
                                     first.status().message()));
  }
  {
    MutexLock lock(&s->mu_);
    s->daemons_.push_back({.daemon = *std::move(first), .retire_by = {}});
  }
  s->acceptor_ = std::thread([server = s.get()] { server->AcceptLoop(); });
  return s;
}

StatusHttpServer::~StatusHttpServer() {
  if (acceptor_.joinable()) {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    Wake();
    acceptor_.join();
  }
  std::vector<Generation> daemons;
  {
    MutexLock lock(&mu_);
    daemons.swap(daemons_);
  }
  daemons.clear();  // stops each (their callbacks may still Wake(): wake_fd_ is open)
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

absl::StatusOr<std::unique_ptr<StatusHttpServer::Daemon>> StatusHttpServer::StartDaemon(
    std::optional<Certificate> certificate) {
  auto daemon = std::make_unique<Daemon>(*this, std::move(certificate));
  // No listening socket of its own (the accept thread hands it connections; MHD_USE_ITC wakes
  // its thread for each).
  unsigned int flags =
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC | MHD_USE_ERROR_LOG;
  std::vector<MHD_OptionItem> options = {
      {MHD_OPTION_CONNECTION_TIMEOUT, static_cast<intptr_t>(kConnectionTimeout.count()), nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, kMaxConnections, nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<intptr_t>(kConnectionMemory), nullptr},
      {MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&Daemon::OnConnection),
       daemon.get()},
  };
  if (const std::optional<Certificate>& c = daemon->certificate) {
    flags |= MHD_USE_TLS;
    options.push_back({MHD_OPTION_HTTPS_PRIORITIES, 0, const_cast<char*>(kTlsPriorities)});
    options.push_back(
        {MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(c->certificate_chain.c_str())});
    options.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(c->private_key.c_str())});
    // With CAs, MHD asks each client for a certificate (and trusts them for the verification).
    if (!c->client_ca.empty()) {
      options.push_back({MHD_OPTION_HTTPS_MEM_TRUST, 0, const_cast<char*>(c->client_ca.c_str())});
    }
  }
  options.push_back({MHD_OPTION_END, 0, nullptr});
  std::string messages;
  start_messages = &messages;
  daemon->mhd = MHD_start_daemon(flags, 0, nullptr, nullptr, &Daemon::OnRequest, daemon.get(),
                                 MHD_OPTION_EXTERNAL_LOGGER, &OnMhdLog, nullptr, MHD_OPTION_ARRAY,
                                 options.data(), MHD_OPTION_END);
  start_messages = nullptr;
  if (daemon->mhd == nullptr) {
    return absl::InternalError(
        absl::StrCat("libmicrohttpd did not start", messages.empty() ? "" : ": ", messages));
  }
  return daemon;
}

absl::Status StatusHttpServer::UseCertificate(const Certificate& certificate) {
  if (!https_) {
    return absl::FailedPreconditionError("the metrics listener is plain HTTP: no certificate");
  }
  absl::StatusOr<std::unique_ptr<Daemon>> next = StartDaemon(certificate);
  if (!next.ok()) {
    return absl::Status(next.status().code(),
                        absl::StrCat("the metrics listener: ", next.status().message()));
  }
  {
    MutexLock lock(&mu_);
    Generation& previous = daemons_.back();
    previous.retire_by = Clock::now() + kRetireTimeout;
    previous.daemon->retired.store(true);
    daemons_.push_back({.daemon = *std::move(next), .retire_by = {}});
  }
  Wake();  // to stop the previous one once it has no connection left
  return absl::OkStatus();
}

void StatusHttpServer::Wake() const {
  const uint64_t one = 1;
  // Fails only when the counter is full, which leaves the thread woken all the same.
  [[maybe_unused]] const ssize_t written = write(wake_fd_, &one, sizeof(one));
}

int StatusHttpServer::TakeDoneDaemons(std::vector<std::unique_ptr<Daemon>>& done) {
  MutexLock lock(&mu_);
  const Clock::time_point now = Clock::now();
  std::optional<Clock::time_point> next;
  // The newest (last) serves; the others are retired.
  for (size_t i = 0; i + 1 < daemons_.size();) {
    Generation& g = daemons_[i];
    const int open = g.daemon->open.load();
    if (open <= 0 || now >= g.retire_by) {
      if (open > 0) {
        spdlog::info(
            "metrics https: {} connections still on the previous certificate after {} s "
            "are closed",
            open, kRetireTimeout.count());
      }
      done.push_back(std::move(g.daemon));
      daemons_.erase(daemons_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    next = next ? std::min(*next, g.retire_by) : g.retire_by;
    ++i;
  }
  if (!next) return -1;
  // Rounded up, so that the wait does not end just before the deadline.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(*next - now).count());
}

void StatusHttpServer::AcceptLoop() {
  for (;;) {
    std::vector<std::unique_ptr<Daemon>> done;
    const int timeout_ms = TakeDoneDaemons(done);
    done.clear();  // stopped outside the lock: MHD_stop_daemon joins the daemon's thread
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
    }
    pollfd fds[] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, timeout_ms) < 0) continue;  // EINTR (or ENOMEM: try again)
    if ((fds[1].revents & POLLIN) != 0) {
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t read_bytes = read(wake_fd_, &count, sizeof(count));
    }
    if ((fds[0].revents & POLLIN) != 0) AcceptPending();
  }
}

void StatusHttpServer::AcceptPending() {
  for (int accepted = 0; accepted < kAcceptBatch; ++accepted) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;  // it left
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        spdlog::debug("metrics http: accept: {}", std::strerror(errno));
        std::this_thread::sleep_for(kAcceptBackoff);
      }
      return;  // EAGAIN: none left (or, after the wait, out of descriptors)
    }
    // The newest daemon; it stays after the lock is let go, since only this thread (and the
    // destructor, once this thread has ended) stops daemons.
    Daemon* daemon = nullptr;
    {
      MutexLock lock(&mu_);
      daemon = daemons_.back().daemon.get();
    }
    daemon->open.fetch_add(1);
    // MHD closes the socket itself when it cannot take it (at kMaxConnections, say).
    if (MHD_add_connection(daemon->mhd, fd, reinterpret_cast<sockaddr*>(&addr), len) != MHD_YES) {
      daemon->open.fetch_sub(1);
    }
  }
}

}  // namespace gecd::daemon
