#include "daemon/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace gecd::daemon {
namespace {

// A bound datagram socket standing in for systemd's notification socket; `name` is a path or
// "@abstract".
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& name) : fd_(socket(AF_UNIX, SOCK_DGRAM, 0)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    name.copy(addr.sun_path, name.size());
    if (name[0] == '@') addr.sun_path[0] = '\0';
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr),
                   offsetof(sockaddr_un, sun_path) + name.size()),
              0);
    setenv("NOTIFY_SOCKET", name.c_str(), 1);
  }
  ~NotifySocket() {
    unsetenv("NOTIFY_SOCKET");
    close(fd_);
  }

  std::string Receive() {
    char buf[256];
    const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    return n > 0 ? std::string(buf, n) : "";
  }

 private:
  int fd_;
};

TEST(SdNotifyTest, NoSocketIsANoOp) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(NotifySystemd("READY=1").ok());
}

TEST(SdNotifyTest, SendsToAPathSocket) {
  NotifySocket socket(testing::MakeTempDir() + "/notify");
  ASSERT_TRUE(NotifySystemd("READY=1").ok());
  EXPECT_EQ(socket.Receive(), "READY=1");
}

TEST(SdNotifyTest, SendsToAnAbstractSocket) {
  NotifySocket socket(absl::StrCat("@gecd-sd-notify-test-", getpid()));
  ASSERT_TRUE(NotifySystemd("STOPPING=1").ok());
  EXPECT_EQ(socket.Receive(), "STOPPING=1");
}

TEST(SdNotifyTest, ReportsAnUnreachableSocket) {
  setenv("NOTIFY_SOCKET", (testing::MakeTempDir() + "/nobody-listens").c_str(), 1);
  EXPECT_FALSE(NotifySystemd("READY=1").ok());
  setenv("NOTIFY_SOCKET", "relative/path", 1);
  EXPECT_FALSE(NotifySystemd("READY=1").ok());
  unsetenv("NOTIFY_SOCKET");
}

}  // namespace
}  // namespace gecd::daemon
