#include "common/bound_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/loopback.h"
#include "gtest/gtest.h"

namespace gecd {
namespace {

// A listener bound to port 0: the port BoundPort names is the one a client reaches it on.
TEST(BoundPortTest, IsThePortTheKernelChose) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  const sockaddr_in any = LoopbackAddress(0);
  ASSERT_EQ(bind(listener, reinterpret_cast<const sockaddr*>(&any), sizeof any), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  const int port = BoundPort(listener);
  ASSERT_GT(port, 0);
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in there = LoopbackAddress(port);
  EXPECT_EQ(connect(client, reinterpret_cast<const sockaddr*>(&there), sizeof there), 0);
  const int accepted = accept(listener, nullptr, nullptr);
  EXPECT_GE(accepted, 0);
  close(accepted);
  close(client);
  close(listener);
}

TEST(BoundPortTest, ReadsAnIPv6Socket) {
  const int v6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(v6, 0);
  sockaddr_in6 any{};
  any.sin6_family = AF_INET6;
  any.sin6_addr = in6addr_loopback;
  if (bind(v6, reinterpret_cast<const sockaddr*>(&any), sizeof any) == 0) {
    EXPECT_GT(BoundPort(v6), 0);
  }  // else a host without ::1
  close(v6);
}

TEST(BoundPortTest, IsZeroForWhatIsNotABoundSocket) {
  EXPECT_EQ(BoundPort(-1), 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_EQ(BoundPort(pipe_fds[0]), 0);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  const int unbound = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(BoundPort(unbound), 0);  // family AF_INET, port 0 until bound
  close(unbound);
}

}  // namespace
}  // namespace gecd
