#include "daemon/listen_address.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"

namespace gecd::daemon {
namespace {

using ::testing::HasSubstr;

TEST(ListenAddressTest, ParsesHostAndPort) {
  auto v4 = ParseListenAddress("0.0.0.0:50051", "server.listen");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "0.0.0.0");
  EXPECT_EQ(v4->port, 50051);
  auto v6 = ParseListenAddress("[::1]:0", "server.listen");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  for (const char* bad : {"50051", "host:", "host:x", "host:70000", "host:-1"}) {
    auto e = ParseListenAddress(bad, "server.metrics_listen");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_THAT(e.status().message(), HasSubstr("server.metrics_listen")) << bad;
  }
}

TEST(ListenAddressTest, APortAnotherSocketHoldsIsRefusedNamingTheKey) {
  int port = 0;
  {
    const gecd::testing::HeldTcpPort held(/*reuse_port=*/true);
    port = held.port();
    ASSERT_GT(port, 0);
    const absl::Status taken =
        CheckListenAddressFree("127.0.0.1:" + std::to_string(port), "server.listen");
    EXPECT_EQ(taken.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(taken.message(), HasSubstr("server.listen 127.0.0.1:"));
    EXPECT_THAT(taken.message(), HasSubstr("already in use"));
  }
  EXPECT_TRUE(CheckListenAddressFree("127.0.0.1:" + std::to_string(port), "server.listen").ok());
  EXPECT_TRUE(CheckListenAddressFree("127.0.0.1:0", "server.listen").ok());
}

}  // namespace
}  // namespace gecd::daemon
