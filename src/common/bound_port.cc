#include "common/bound_port.h"

#include <netinet/in.h>
#include <sys/socket.h>

namespace gecd {

int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t size = sizeof bound;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size) != 0) return 0;
  switch (bound.ss_family) {
    case AF_INET6:
      return ntohs(reinterpret_cast<const sockaddr_in6&>(bound).sin6_port);
    case AF_INET:
      return ntohs(reinterpret_cast<const sockaddr_in&>(bound).sin_port);
    default:
      return 0;
  }
}

}  // namespace gecd
