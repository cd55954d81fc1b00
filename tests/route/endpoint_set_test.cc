#include "route/endpoint_set.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "route/fake_daemon.h"

namespace gecd::route {
namespace {

using std::chrono::milliseconds;
using testing::FakeDaemon;

EndpointSet::Options Options(double slow_start_s = 0) {
  EndpointSet::Options o;
  o.slow_start = {.window_s = slow_start_s, .min_weight = 0.1, .aggression = 1};
  o.ejection = {.failures = 2, .base = milliseconds(100), .max = milliseconds(400)};
  return o;
}

template <typename Pred>
bool WaitFor(Pred pred, milliseconds timeout = milliseconds(5000)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

TEST(EndpointSetTest, DrainingEndpointsTakeNoNewCalls) {
  EndpointSet set(Options());
  set.Update({{.address = "127.0.0.1:1"}, {.address = "127.0.0.1:2", .draining = true}});
  for (int i = 0; i < 100; ++i) ASSERT_EQ(set.Pick()->address(), "127.0.0.1:1");
  EXPECT_EQ(set.counts().eligible, 1);
  EXPECT_EQ(set.counts().draining, 1);
  set.Update({{.address = "127.0.0.1:2", .draining = true}});
  EXPECT_EQ(set.Pick(), nullptr);
  EXPECT_FALSE(set.AnyEligible());
  set.Update({{.address = "127.0.0.1:2"}});  // ready again
  EXPECT_EQ(set.Pick()->address(), "127.0.0.1:2");
}

TEST(EndpointSetTest, DuplicateAddressesAreOneEndpoint) {
  EndpointSet set(Options());
  set.Update({{.address = "127.0.0.1:1"}, {.address = "127.0.0.1:1"}});
  EXPECT_EQ(set.Stats().size(), 1u);
}

TEST(EndpointSetTest, ANewEndpointRampsUpButTheFirstReportDoesNot) {
  EndpointSet set(Options(/*slow_start_s=*/0.3));
  set.Update({{.address = "127.0.0.1:1"}});
  std::shared_ptr<Endpoint> old = set.Pick();
  // Four calls in flight on the old endpoint: load 5. The newcomer, at weight ~0.1, weighs in
  // at ~10 and loses every draw; at full weight (load 1) it wins every draw.
  for (int i = 0; i < 4; ++i) old->CallStarted();
  set.Update({{.address = "127.0.0.1:1"}, {.address = "127.0.0.1:2"}});
  for (int i = 0; i < 100; ++i) ASSERT_EQ(set.Pick().get(), old.get());
  std::this_thread::sleep_for(milliseconds(350));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(set.Pick()->address(), "127.0.0.1:2");
}

TEST(EndpointSetTest, EjectedEndpointsReturnAfterAPassingHealthCheck) {
  FakeDaemon daemon("a");
  EndpointSet set(Options());
  set.Update({{.address = daemon.address()}});
  std::shared_ptr<Endpoint> e = set.Pick();
  daemon.SetServing(false);
  for (int i = 0; i < 2; ++i) {
    e->CallStarted();
    set.CallEnded(*e, grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_EQ(set.counts().ejected, 1);
  EXPECT_EQ(set.Pick(), nullptr);
  // NOT_SERVING: the checks fail and each ejection lasts longer.
  ASSERT_TRUE(WaitFor([&] { return set.counts().ejections >= 3; }));
  EXPECT_EQ(set.counts().ejected, 1);
  EXPECT_GE(e->back_off(), milliseconds(400));
  daemon.SetServing(true);
  ASSERT_TRUE(WaitFor([&] { return set.AnyEligible(); }));
  EXPECT_EQ(set.Pick().get(), e.get());
  EXPECT_EQ(set.counts().ejected, 0);
}

TEST(EndpointSetTest, OtherCodesDoNotEject) {
  EndpointSet set(Options());
  set.Update({{.address = "127.0.0.1:1"}});
  std::shared_ptr<Endpoint> e = set.Pick();
  for (auto code : {grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::INVALID_ARGUMENT,
                    grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::DEADLINE_EXCEEDED,
                    grpc::StatusCode::CANCELLED, grpc::StatusCode::OK}) {
    e->CallStarted();
    set.CallEnded(*e, code);
  }
  EXPECT_EQ(set.counts().ejected, 0);
  EXPECT_EQ(e->in_flight(), 0);
  EXPECT_EQ(e->requests(), 6u);
}

}  // namespace
}  // namespace gecd::route
