#ifndef GECD_DAEMON_LISTEN_ADDRESS_H_
#define GECD_DAEMON_LISTEN_ADDRESS_H_

#include <netdb.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// The "host:port" addresses of server.listen and server.metrics_listen.
namespace gecd::daemon {

struct ListenAddress {
  std::string host;  // without the brackets of "[v6]:port"
  int port = 0;      // 0: any free port
};

// InvalidArgument naming `key` unless `listen` is "host:port" or "[v6]:port", port 0..65535.
absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view listen, std::string_view key);

// The TCP addresses a server binds for `address` (getaddrinfo with AI_PASSIVE; an empty host is
// every interface), freed with the list. Unavailable with getaddrinfo's reason.
struct AddressListDeleter {
  void operator()(addrinfo* list) const { freeaddrinfo(list); }
};
using AddressList = std::unique_ptr<addrinfo, AddressListDeleter>;
absl::StatusOr<AddressList> ResolveListenAddress(const ListenAddress& address);

// FailedPrecondition naming `key` when another socket already holds `listen`'s port. gecd's
// workers bind server.listen with SO_REUSEPORT, which would let a second daemon share the port
// with the first without a word (and clients reach either); a plain bind is refused instead.
// Port 0 is always free.
absl::Status CheckListenAddressFree(std::string_view listen, std::string_view key);

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_LISTEN_ADDRESS_H_
