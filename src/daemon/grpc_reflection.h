#ifndef GECD_DAEMON_GRPC_REFLECTION_H_
#define GECD_DAEMON_GRPC_REFLECTION_H_

#include "grpcpp/server_builder.h"

// gRPC server reflection on a server being built, on or off (server.reflection for the
// workers, route.reflection for the router). Linking grpc++_reflection registers its plugin for
// every ServerBuilder of the process at static initialisation, so "off" cannot mean "not
// registered": it removes the plugin from this builder. Call before BuildAndStart, from the
// thread that builds the server.
namespace gecd::daemon {

void SetReflection(grpc::ServerBuilder& builder, bool enabled);

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_GRPC_REFLECTION_H_
