#include "daemon/status_http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/listen_address.h"
#include "spdlog/spdlog.h"

namespace gecd::daemon {
namespace {

constexpr char kPrometheusType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr char kTextType[] = "text/plain";

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

// libmicrohttpd's request callback, on its thread: first with the headers, then with each
// piece of a body, and a last time once the request is complete. A GET is answered on the
// last call: answered earlier, MHD closes the connection (no keep-alive) or, with a body still
// unread, sends nothing. A body, which none of the paths takes, is read and dropped. Another
// method is refused at once (MHD then closes the connection).
MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url, const char* method,
                     const char* /*version*/, const char* /*upload_data*/, size_t* upload_data_size,
                     void** request_state) {
  const auto& handlers = *static_cast<const StatusHttpServer::Handlers*>(cls);
  const std::string_view m(method);
  const bool known_method = m == MHD_HTTP_METHOD_GET || m == MHD_HTTP_METHOD_HEAD;
  if (known_method && *request_state == nullptr) {
    *request_state = connection;  // any non-null marker: headers seen
    return MHD_YES;
  }
  if (known_method && *upload_data_size != 0) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  const Answer answer = known_method ? Route(handlers, url)
                                     : Answer{MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n"};
  MHD_Response* response = MHD_create_response_from_buffer(
      answer.body.size(), const_cast<char*>(answer.body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // out of memory: MHD closes the connection
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, answer.content_type);
  if (!known_method) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  const MHD_Result queued = MHD_queue_response(connection, answer.status, response);
  MHD_destroy_response(response);
  return queued;
}

// MHD's own messages (a refused connection at the limit, a client's malformed request): debug
// only, since a flood of bad clients would otherwise flood the log.
void OnMhdLog(void* /*cls*/, const char* format, va_list args) {
  char line[512];
  std::vsnprintf(line, sizeof(line), format, args);
  std::string_view text(line);
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  spdlog::debug("metrics http: {}", text);
}

// A listening socket on the first of `host`'s addresses that binds (IPv6 ones dual-stack, as
// "[::]:port" serves IPv4 too), or an error naming `listen` and the reason.
absl::StatusOr<int> Listen(const std::string& listen, const ListenAddress& address) {
  const std::string prefix = absl::StrCat("cannot listen on ", listen, " (metrics): ");
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

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  return ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<StatusHttpServer>> StatusHttpServer::Start(const std::string& listen,
                                                                          Handlers handlers) {
  ASSIGN_OR_RETURN(const ListenAddress address,
                   ParseListenAddress(listen, "server.metrics_listen"));
  ASSIGN_OR_RETURN(const int fd, Listen(listen, address));
  std::unique_ptr<StatusHttpServer> s(new StatusHttpServer(std::move(handlers)));
  s->port_ = BoundPort(fd);
  // On success MHD owns `fd` (MHD_stop_daemon closes it).
  s->daemon_ = MHD_start_daemon(
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, nullptr, nullptr, &OnRequest,
      const_cast<Handlers*>(&s->handlers_), MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(kConnectionTimeout.count()),
      MHD_OPTION_CONNECTION_LIMIT, kMaxConnections, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      kConnectionMemory, MHD_OPTION_EXTERNAL_LOGGER, &OnMhdLog, nullptr, MHD_OPTION_END);
  if (s->daemon_ == nullptr) {
    close(fd);
    return absl::InternalError(
        absl::StrCat("cannot serve ", listen, " (metrics): ", "libmicrohttpd did not start"));
  }
  return s;
}

StatusHttpServer::~StatusHttpServer() { MHD_stop_daemon(daemon_); }

}  // namespace gecd::daemon
