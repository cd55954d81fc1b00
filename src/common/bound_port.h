#ifndef GECD_COMMON_BOUND_PORT_H_
#define GECD_COMMON_BOUND_PORT_H_

// The local port of a bound socket: what the kernel chose when it was bound to port 0. One
// getsockname for every listener that may be given port 0 (the workers' gate, the status
// server, the router's relay) and for the tests' and tools' loopback ports. Thread-safe: no
// state.
namespace gecd {

// `fd`'s local port; 0 when `fd` is not a bound IPv4 or IPv6 socket.
int BoundPort(int fd);

}  // namespace gecd

#endif  // GECD_COMMON_BOUND_PORT_H_
