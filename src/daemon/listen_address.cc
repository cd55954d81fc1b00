#include "daemon/listen_address.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gecd::daemon {

absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view listen, std::string_view key) {
  const std::string text(listen);
  const size_t colon = text.rfind(':');
  ListenAddress a;
  if (colon == std::string::npos || !absl::SimpleAtoi(text.substr(colon + 1), &a.port) ||
      a.port < 0 || a.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(key), " '", text, "' is not host:port"));
  }
  a.host = text.substr(0, colon);
  if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  return a;
}

absl::StatusOr<AddressList> ResolveListenAddress(const ListenAddress& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  if (const int rc = getaddrinfo(address.host.empty() ? nullptr : address.host.c_str(),
                                 port.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(gai_strerror(rc));
  }
  return AddressList(found);
}

absl::Status CheckListenAddressFree(std::string_view listen, std::string_view key) {
  ASSIGN_OR_RETURN(const ListenAddress a, ParseListenAddress(listen, key));
  if (a.port == 0) return absl::OkStatus();
  absl::StatusOr<AddressList> found = ResolveListenAddress(a);
  if (!found.ok()) return absl::OkStatus();  // the server's own bind reports an unusable host
  absl::Status status = absl::OkStatus();
  for (addrinfo* ai = found->get(); ai != nullptr && status.ok(); ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));  // TIME_WAIT is no owner
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EADDRINUSE) {
      status = absl::FailedPreconditionError(
          absl::StrCat(std::string(key), " ", std::string(listen),
                       ": the port is already in use (another gecd serve?)"));
    }
    close(fd);
  }
  return status;
}

}  // namespace gecd::daemon
