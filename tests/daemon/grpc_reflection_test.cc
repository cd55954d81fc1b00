// daemon::SetReflection on an in-process server, and its keys end to end: server.reflection on
// `gecd serve`'s workers and route.reflection on `gecd route` (on by default, UNIMPLEMENTED when
// turned off, health unaffected).
#include "daemon/grpc_reflection.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"

namespace gecd::daemon {
namespace {

using gecd::testing::DaemonProcess;
using ::testing::HasSubstr;

// The outcome of one ServerReflectionInfo call asking to list the services, and the raw answer.
struct ListServices {
  grpc::Status status;
  std::string response;
};

// ServerReflectionRequest{list_services: "*"} (field 7, a string) by hand: the test needs no
// generated reflection stubs. One request and a half-close make the bidi stream a unary call,
// which the reflection service answers with one response.
ListServices CallListServices(const std::string& target) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::Slice slice(std::string("\x3a\x01*", 3));
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                 grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  ListServices result{.status = done.get_future().get(), .response = ""};
  std::vector<grpc::Slice> slices;
  if (result.status.ok() && response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      result.response.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return result;
}

// A server on a free loopback port with reflection as asked, the default health service, and a
// generic service that answers any other method UNIMPLEMENTED (gRPC builds no server without
// one service of its own).
struct TestServer {
  explicit TestServer(bool reflection) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    SetReflection(builder, reflection);
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterCallbackGenericService(&generic);
    server = builder.BuildAndStart();
  }
  std::string target() const { return absl::StrCat("127.0.0.1:", port); }

  grpc::CallbackGenericService generic;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

TEST(GrpcReflectionTest, OnListsTheServices) {
  TestServer on(true);
  ASSERT_NE(on.server, nullptr);
  const ListServices answer = CallListServices(on.target());
  ASSERT_TRUE(answer.status.ok()) << answer.status.error_message();
  EXPECT_THAT(answer.response, HasSubstr("grpc.health.v1.Health"));
}

// The plugin is registered for every builder of the process (by the library's static
// initialiser, and by SetReflection): off must still mean off, on that builder only.
TEST(GrpcReflectionTest, OffIsUnimplementedOnThatServerAlone) {
  TestServer off(false);
  TestServer on(true);
  ASSERT_NE(off.server, nullptr);
  ASSERT_NE(on.server, nullptr);
  EXPECT_EQ(CallListServices(off.target()).status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_TRUE(CallListServices(on.target()).status.ok());
}

TEST(GrpcReflectionTest, TheDaemonAndTheRouterOfferItByDefault) {
  DaemonProcess daemon({"server.workers=1"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  const ListServices direct = CallListServices(daemon.grpc_target());
  ASSERT_TRUE(direct.status.ok()) << direct.status.error_message();
  EXPECT_THAT(direct.response, HasSubstr("gecd.v1.GrammarCorrection"));

  auto router =
      DaemonProcess::Router({absl::StrCat("route.endpoints.static=", daemon.grpc_target())});
  ASSERT_TRUE(router->WaitReady()) << router->log();
  const ListServices routed = CallListServices(router->grpc_target());
  ASSERT_TRUE(routed.status.ok()) << routed.status.error_message();
  EXPECT_THAT(routed.response, HasSubstr("gecd.v1.GrammarCorrection"));
}

TEST(GrpcReflectionTest, TurnedOffOnTheDaemonAndTheRouterIsUnimplemented) {
  DaemonProcess daemon({"server.workers=1", "server.reflection=false"});
  // Ready: the workers' health answers without reflection.
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  EXPECT_EQ(CallListServices(daemon.grpc_target()).status.error_code(),
            grpc::StatusCode::UNIMPLEMENTED);

  auto router = DaemonProcess::Router(
      {absl::StrCat("route.endpoints.static=", daemon.grpc_target()), "route.reflection=false"});
  // Ready: an endpoint passed the router's health check.
  ASSERT_TRUE(router->WaitReady()) << router->log();
  EXPECT_EQ(CallListServices(router->grpc_target()).status.error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace gecd::daemon
