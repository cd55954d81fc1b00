// gecd route in front of real `gecd serve` daemons (echo backend) on loopback.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "loadgen/load_runner.h"
#include "testing/daemon_process.h"
#include "testing/sanitized.h"
#include "testing/scoped_temp_dir.h"
#include "tls/test_certificates.h"

namespace gecd::route {
namespace {

using gecd::testing::DaemonProcess;

struct Fleet {
  std::vector<std::unique_ptr<DaemonProcess>> daemons;

  // `sets[i]` for daemon i, on top of one worker each (two shared cores, several daemons).
  explicit Fleet(const std::vector<std::vector<std::string>>& sets) {
    for (const auto& s : sets) {
      std::vector<std::string> all = {"server.workers=1", "server.drain_quiet_ms=300"};
      all.insert(all.end(), s.begin(), s.end());
      daemons.push_back(std::make_unique<DaemonProcess>(all));
    }
    for (auto& d : daemons) EXPECT_TRUE(d->WaitReady()) << d->log();
  }

  std::string Endpoints() const {
    std::vector<std::string> targets;
    for (const auto& d : daemons) targets.push_back(d->grpc_target());
    return absl::StrJoin(targets, ",");
  }

  // `sets` after the endpoints and the policy.
  std::unique_ptr<DaemonProcess> Router(const std::string& policy,
                                        const std::vector<std::string>& sets = {}) const {
    std::vector<std::string> all = {absl::StrCat("route.endpoints.static=", Endpoints()),
                                    absl::StrCat("route.policy=", policy)};
    all.insert(all.end(), sets.begin(), sets.end());
    auto router = DaemonProcess::Router(all);
    EXPECT_TRUE(router->WaitReady()) << router->log();
    return router;
  }
};

// `tls_ca_pem`: the CAs a TLS router's certificate chains to ("" = plaintext).
loadgen::RunResult Load(const DaemonProcess& router, double qps, double seconds,
                        const std::string& tls_ca_pem = "") {
  loadgen::RunConfig run;
  run.tls_ca_pem = tls_ca_pem;
  run.tls_server_name = "localhost";
  run.targets = {router.grpc_target()};
  run.channels = 4;
  run.profile = loadgen::RateProfile::Constant(qps);
  run.duration_s = seconds;
  run.warmup_s = 0.5;
  run.sentences = {"She go to school yesterday.", "The cat sat on the mat.",
                   "Their is a problem with this sentence."};
  absl::StatusOr<loadgen::RunResult> result = loadgen::RunLoad(run);
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) return *std::move(result);
  return loadgen::RunResult();
}

std::string Errors(const loadgen::RunResult& r) {
  std::vector<std::string> parts;
  for (const auto& [code, n] : r.errors) parts.push_back(absl::StrCat(code, "=", n));
  return absl::StrJoin(parts, " ");
}

TEST(RouteDaemonTest, P2cKeepsTheTailOffASlowDaemonThatRoundRobinOverloads) {
  // The slow daemon runs one sequence per 20 ms step: 50 calls/s at most. Round robin hands it
  // a third of 180/s, more than it can take, so its queue grows for the whole run; p2c sees its
  // calls pile up and sends it fewer.
  Fleet fleet({{}, {}, {"engine.echo_step_ms=20", "engine.max_batch_size=1"}});
  auto p2c = fleet.Router("p2c");
  auto rr = fleet.Router("round_robin");
  const loadgen::RunResult by_p2c = Load(*p2c, 180, 4);
  const loadgen::RunResult by_rr = Load(*rr, 180, 4);
  EXPECT_EQ(by_p2c.error_count(), 0u) << Errors(by_p2c);
  EXPECT_EQ(by_p2c.ok, by_p2c.sent);
  EXPECT_GT(by_p2c.ok, 500u);
  const int64_t p99_p2c = by_p2c.ok_latency.Percentile(0.99);
  const int64_t p99_rr = by_rr.ok_latency.Percentile(0.99);
  RecordProperty("p99_p2c_us", static_cast<int>(p99_p2c));
  RecordProperty("p99_round_robin_us", static_cast<int>(p99_rr));
  // The latency ratio only without a sanitizer (CI's ASan gate, in parallel with other tests,
  // measured 94 vs 206 ms once); the routing share below holds either way.
  if (!gecd::testing::kSanitized) {
    EXPECT_LT(p99_p2c * 3, p99_rr) << "p2c p99 " << p99_p2c << " us, round robin " << p99_rr;
  }
  // Where the calls went: the slow daemon got the smallest share under p2c.
  const std::string slow = fleet.daemons[2]->grpc_target();
  const auto to_slow =
      p2c->Metric(absl::StrCat("gecd_route_endpoint_requests_total{endpoint=\"", slow, "\"}"));
  const auto to_fast = p2c->Metric(absl::StrCat("gecd_route_endpoint_requests_total{endpoint=\"",
                                                fleet.daemons[0]->grpc_target(), "\"}"));
  ASSERT_TRUE(to_slow && to_fast);
  EXPECT_LT(*to_slow, *to_fast);
}

TEST(RouteDaemonTest, SigtermOfOneDaemonUnderLoadFailsNoRequest) {
  Fleet fleet({{}, {}, {}});
  auto router = fleet.Router("p2c");
  std::thread stop([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    kill(fleet.daemons[0]->pid(), SIGTERM);
  });
  const loadgen::RunResult r = Load(*router, 150, 4);
  stop.join();
  EXPECT_TRUE(fleet.daemons[0]->WaitExit(std::chrono::seconds(20)).has_value());
  EXPECT_GT(r.ok, 400u);
  EXPECT_EQ(r.error_count(), 0u) << Errors(r) << "\n" << router->log();
  EXPECT_EQ(r.ok, r.sent);
}

TEST(RouteDaemonTest, TheUnaryCallsOfAKilledDaemonAreRetriedElsewhere) {
  // 100 ms steps keep ~10 calls in flight on each daemon when it dies.
  Fleet fleet(
      {{"engine.echo_step_ms=100"}, {"engine.echo_step_ms=100"}, {"engine.echo_step_ms=100"}});
  auto router = fleet.Router("p2c");
  DaemonProcess& victim = *fleet.daemons[0];
  const std::map<std::string, pid_t> children = victim.WaitForChildren(1);
  std::thread kill_it([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    // The whole pod at once, as the OOM killer or a node failure would.
    for (const auto& [title, pid] : children) kill(pid, SIGKILL);
    kill(victim.pid(), SIGKILL);
  });
  const loadgen::RunResult r = Load(*router, 150, 4);
  kill_it.join();
  EXPECT_TRUE(victim.WaitExit(std::chrono::seconds(10)).has_value());
  EXPECT_GT(r.ok, 400u);
  EXPECT_EQ(r.error_count(), 0u) << Errors(r) << "\n" << router->log();
  const auto retries = router->Metric("gecd_route_retries_total");
  ASSERT_TRUE(retries.has_value());
  EXPECT_GE(*retries, 1) << "no call was in flight on the killed daemon";
  EXPECT_EQ(router->Metric("gecd_route_endpoints{state=\"eligible\"}"), 2);
}

// One Correct over a connection of its own to `target`, the server's name checked as localhost.
grpc::StatusCode CorrectOnce(const std::string& target,
                             const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetSslTargetNameOverride("localhost");
  auto stub = v1::GrammarCorrection::NewStub(grpc::CreateCustomChannel(target, credentials, args));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::CorrectRequest request;
  request.set_text("she go home");
  v1::CorrectResponse response;
  return stub->Correct(&context, request, &response).error_code();
}

// The whole TLS path with the real binaries: clients speak TLS to gecd route, which speaks mTLS
// to gecd serve daemons that require a client certificate (and refuse a client without one).
// The router's certificate rotated on disk in the middle of a load run fails no call and serves
// the next connection.
TEST(RouteDaemonTest, RelaysOverMutualTlsToDaemonsThatRequireItAndRotatesUnderLoad) {
  gecd::testing::ScopedTempDir dir;
  const auto file = [&](const std::string& name, const std::string& bytes) {
    gecd::testing::WriteTestFile(dir.path() + "/" + name, bytes);
    return dir.path() + "/" + name;
  };
  const gecd::testing::TestCa pods("pod CA"), routers("router client CA"), front("router CA"),
      next("next router CA");
  const gecd::testing::PemPair pod = pods.Issue("pod");
  const gecd::testing::PemPair client = routers.Issue("router");
  const std::vector<std::string> pod_tls = {
      "tls.cert_file=" + file("pod.crt", pod.certificate),
      "tls.key_file=" + file("pod.key", pod.key),
      "tls.client_ca_file=" + file("routers.crt", routers.certificate()),
      "tls.require_client_cert=true"};
  Fleet fleet({pod_tls, pod_tls});
  const gecd::testing::PemPair own = front.Issue("router");
  const std::string cert = file("router.crt", own.certificate);
  const std::string key = file("router.key", own.key);
  auto router =
      fleet.Router("p2c", {"tls.cert_file=" + cert, "tls.key_file=" + key, "tls.refresh_s=1",
                           "route.upstream_tls.ca_file=" + file("pods.crt", pods.certificate()),
                           "route.upstream_tls.cert_file=" + file("client.crt", client.certificate),
                           "route.upstream_tls.key_file=" + file("client.key", client.key)});

  // The daemons let in nothing but a client certificate of their CA.
  const gecd::testing::PemPair stranger = front.Issue("router");
  EXPECT_EQ(CorrectOnce(fleet.daemons[0]->grpc_target(), gecd::testing::Trusting(pods)),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CorrectOnce(fleet.daemons[0]->grpc_target(), gecd::testing::Trusting(pods, &stranger)),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CorrectOnce(router->grpc_target(), grpc::InsecureChannelCredentials()),
            grpc::StatusCode::UNAVAILABLE);

  std::thread rotate([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const gecd::testing::PemPair rotated = next.Issue("router");
    gecd::testing::WritePemPair(rotated, cert, key);
  });
  const loadgen::RunResult r = Load(*router, 100, 4, front.certificate() + next.certificate());
  rotate.join();
  EXPECT_GT(r.ok, 300u);
  EXPECT_EQ(r.error_count(), 0u) << Errors(r) << "\n" << router->log();
  EXPECT_EQ(r.ok, r.sent);
  // Both daemons served over mTLS.
  for (const auto& d : fleet.daemons) {
    EXPECT_GT(router->Metric(absl::StrCat("gecd_route_endpoint_requests_total{endpoint=\"",
                                          d->grpc_target(), "\"}")),
              0);
  }
  // The next connection gets the rotated certificate.
  EXPECT_TRUE(gecd::testing::WaitFor(
      [&] {
        return CorrectOnce(router->grpc_target(), gecd::testing::Trusting(next)) ==
               grpc::StatusCode::OK;
      },
      std::chrono::seconds(10)));
  EXPECT_EQ(CorrectOnce(router->grpc_target(), gecd::testing::Trusting(front)),
            grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace gecd::route
