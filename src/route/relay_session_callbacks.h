#ifndef GECD_ROUTE_RELAY_SESSION_CALLBACKS_H_
#define GECD_ROUTE_RELAY_SESSION_CALLBACKS_H_

#include <nghttp2/nghttp2.h>

// nghttp2's callbacks for the relay's connections (route/relay.h), the same set for both
// sides: they turn a session's frames into the RelayCall events (route/relay_call.h). A
// session's user data is its RelayConnection; a stream's, its RelayCall. A client's request
// HEADERS creates the RelayCall; a stream's close detaches it from the stream. They run on the
// loop thread that owns the session (inside H2Connection::Read), so they take no lock.
namespace gecd::route {

// A new set of the relay's callbacks; the caller frees it (nghttp2_session_callbacks_del).
nghttp2_session_callbacks* NewRelaySessionCallbacks();

}  // namespace gecd::route

#endif  // GECD_ROUTE_RELAY_SESSION_CALLBACKS_H_
