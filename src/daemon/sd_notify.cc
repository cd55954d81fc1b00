#include "daemon/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace gecd::daemon {
namespace {

absl::Status ErrnoError(const std::string& what) {
  const int err = errno;
  return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(what, ": ", std::strerror(err)));
}

}  // namespace

absl::Status NotifySystemd(std::string_view state) {
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (env == nullptr || env[0] == '\0') return absl::OkStatus();
  const std::string path = env;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path) || (path[0] != '/' && path[0] != '@')) {
    return absl::InvalidArgumentError(absl::StrCat("NOTIFY_SOCKET '", path, "' is not usable"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  // An abstract name is not NUL-terminated: its length is part of the address.
  if (path[0] == '@') addr.sun_path[0] = '\0';
  const socklen_t addr_len = offsetof(sockaddr_un, sun_path) + path.size();

  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("sd_notify socket");
  absl::Cleanup close_fd = [fd] { close(fd); };
  if (sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
             addr_len) < 0) {
    return ErrnoError(absl::StrCat("sd_notify to ", path));
  }
  return absl::OkStatus();
}

}  // namespace gecd::daemon
