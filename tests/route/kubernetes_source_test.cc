#include "route/kubernetes_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "route/fake_kube_api.h"
#include "testing/scoped_temp_dir.h"
#include "testing/test_paths.h"

// The Kubernetes source against FakeKubeApi: HTTPS with the fixture CA, a bearer token from a
// file, the real EndpointSlice JSON over list and watch.
namespace gecd::route {

void PrintTo(const DiscoveredEndpoint& e, std::ostream* os) {
  *os << e.address << (e.draining ? " (draining)" : "");
}

namespace {

using gecd::testing::FakeKubeApi;
using gecd::testing::MakeSlice;
using gecd::testing::SliceEndpoint;
using nlohmann::json;
using Requests = std::vector<FakeKubeApi::Request>;
using namespace std::chrono_literals;

std::vector<DiscoveredEndpoint> Ready(std::vector<std::string> addresses) {
  std::vector<DiscoveredEndpoint> out;
  for (std::string& a : addresses) out.push_back({.address = std::move(a)});
  return out;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Polls `done` (every 2 ms, up to `timeout`): for the source's atomic counters.
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// The reports a source makes, in order.
class Reports {
 public:
  EndpointSource::UpdateCallback Callback() {
    return [this](std::vector<DiscoveredEndpoint> endpoints) {
      std::lock_guard lock(mu_);
      reports_.push_back(std::move(endpoints));
      cv_.notify_all();
    };
  }
  // Waits until the latest report is `expected`.
  bool WaitFor(const std::vector<DiscoveredEndpoint>& expected,
               std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout,
                        [&] { return !reports_.empty() && reports_.back() == expected; });
  }
  std::vector<std::vector<DiscoveredEndpoint>> all() {
    std::lock_guard lock(mu_);
    return reports_;
  }
  size_t size() {
    std::lock_guard lock(mu_);
    return reports_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<DiscoveredEndpoint>> reports_;
};

size_t CountWatches(const Requests& requests) {
  return std::count_if(requests.begin(), requests.end(),
                       [](const FakeKubeApi::Request& r) { return r.watch(); });
}
size_t CountLists(const Requests& requests) { return requests.size() - CountWatches(requests); }

class KubernetesSourceTest : public ::testing::Test {
 protected:
  explicit KubernetesSourceTest(FakeKubeApi::Options fake_options = {}) : fake_(fake_options) {
    token_file_ = dir_.path() + "/token";
    WriteFile(token_file_, "token-1\n");
  }

  KubernetesSourceOptions Options() {
    KubernetesSourceOptions options;
    options.api.server = fake_.url();
    options.api.ca_file = gecd::testing::FixturePath("k8s/ca.crt");
    options.api.token_file = token_file_;
    options.namespace_ = "gec";
    options.service = "gecd";
    options.port = "grpc";
    options.token_refresh = absl::Hours(1);  // re-read on a 401 only, unless a test says
    options.watch_timeout_s = 60;
    options.list_timeout = absl::Seconds(5);
    options.backoff_initial = absl::Milliseconds(5);
    options.backoff_max = absl::Milliseconds(50);
    return options;
  }

  void Start(KubernetesSourceOptions options) {
    source_ = std::make_unique<KubernetesSource>(std::move(options), &counters_);
    ASSERT_TRUE(source_->Start(reports_.Callback()).ok());
  }
  void Start() { Start(Options()); }

  // Waits until `n` watches were opened and one is open now.
  bool WaitForWatch(size_t n = 1) {
    return fake_.WaitFor(
        [n](const Requests& r, int open) { return CountWatches(r) >= n && open >= 1; });
  }

  gecd::testing::ScopedTempDir dir_;
  std::string token_file_;
  FakeKubeApi fake_;
  DiscoveryCounters counters_;
  Reports reports_;
  std::unique_ptr<KubernetesSource> source_;  // last: stopped before the fake server
};

const std::vector<SliceEndpoint> kTwoPods = {{.addresses = {"10.0.0.1"}},
                                             {.addresses = {"10.0.0.2"}}};

TEST_F(KubernetesSourceTest, ListsThenWatchesFromTheListsResourceVersion) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
  ASSERT_TRUE(WaitForWatch());
  const Requests requests = fake_.requests();
  ASSERT_GE(requests.size(), 2u);
  const FakeKubeApi::Request& list = requests[0];
  EXPECT_FALSE(list.watch());
  EXPECT_EQ(list.path, "/apis/discovery.k8s.io/v1/namespaces/gec/endpointslices");
  EXPECT_EQ(list.param("labelSelector"), "kubernetes.io/service-name=gecd");
  EXPECT_EQ(list.param("limit"), "500");
  EXPECT_EQ(list.authorization, "Bearer token-1");
  const FakeKubeApi::Request& watch = requests[1];
  EXPECT_EQ(watch.path, list.path);
  EXPECT_EQ(watch.param("labelSelector"), "kubernetes.io/service-name=gecd");
  EXPECT_EQ(watch.param("watch"), "1");
  EXPECT_EQ(watch.param("allowWatchBookmarks"), "true");
  EXPECT_EQ(watch.param("resourceVersion"), std::to_string(fake_.resource_version()));
  EXPECT_EQ(watch.param("timeoutSeconds"), "60");
  EXPECT_EQ(counters_.updates.load(), 1u);
  EXPECT_EQ(counters_.errors.load(), 0u);
  EXPECT_EQ(counters_.relists.load(), 0u);
}

TEST_F(KubernetesSourceTest, AnEmptyServiceIsReportedOnce) {
  fake_.Apply(MakeSlice("other-a", "other", kTwoPods));  // another Service's slice
  Start();
  ASSERT_TRUE(reports_.WaitFor({}));
  ASSERT_TRUE(WaitForWatch());
  EXPECT_EQ(reports_.size(), 1u);
}

TEST_F(KubernetesSourceTest, PodsAddedAndRemoved) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
  fake_.Apply(MakeSlice(
      "gecd-a", "gecd",
      {{.addresses = {"10.0.0.1"}}, {.addresses = {"10.0.0.2"}}, {.addresses = {"10.0.0.3"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051"})));
  fake_.Apply(MakeSlice("gecd-a", "gecd", {{.addresses = {"10.0.0.3"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.3:50051"})));
  // Another Service's slice changes nothing here (the selector keeps it out).
  fake_.Apply(MakeSlice("other-a", "other", kTwoPods));
  fake_.Apply(MakeSlice("gecd-a", "gecd", {}));
  ASSERT_TRUE(reports_.WaitFor({}));
  EXPECT_EQ(reports_.size(), 4u);
  EXPECT_EQ(counters_.updates.load(), 4u);
  EXPECT_EQ(counters_.errors.load(), 0u);
}

TEST_F(KubernetesSourceTest, AllSlicesOfTheServiceMergedAndDeletedOnesDropped) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
  // A second slice (past 100 endpoints); 10.0.0.2 is in both while it moves: once.
  fake_.Apply(
      MakeSlice("gecd-b", "gecd", {{.addresses = {"10.0.1.1"}}, {.addresses = {"10.0.0.2"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051", "10.0.1.1:50051"})));
  fake_.Delete("gecd-a");
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.2:50051", "10.0.1.1:50051"})));
  fake_.Delete("gecd-b");
  ASSERT_TRUE(reports_.WaitFor({}));
  EXPECT_EQ(counters_.relists.load(), 0u);
}

TEST_F(KubernetesSourceTest, NotReadyRemovedTerminatingDrains) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
  // 10.0.0.1 fails its readiness probe.
  fake_.Apply(MakeSlice("gecd-a", "gecd",
                        {{.addresses = {"10.0.0.1"}, .ready = false, .serving = false},
                         {.addresses = {"10.0.0.2"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.2:50051"})));
  // 10.0.0.2 is deleted: terminating, still serving: no new requests, in-flight ones finish.
  fake_.Apply(MakeSlice(
      "gecd-a", "gecd",
      {{.addresses = {"10.0.0.1"}, .ready = false, .serving = false},
       {.addresses = {"10.0.0.2"}, .ready = false, .serving = true, .terminating = true}}));
  ASSERT_TRUE(reports_.WaitFor({{.address = "10.0.0.2:50051", .draining = true}}));
  // Then it stops serving: gone.
  fake_.Apply(MakeSlice(
      "gecd-a", "gecd",
      {{.addresses = {"10.0.0.1"}, .ready = false, .serving = false},
       {.addresses = {"10.0.0.2"}, .ready = false, .serving = false, .terminating = true}}));
  ASSERT_TRUE(reports_.WaitFor({}));
  // Conditions left out (nil): ready.
  fake_.Apply(MakeSlice("gecd-a", "gecd",
                        {{.addresses = {"10.0.0.1"},
                          .ready = std::nullopt,
                          .serving = std::nullopt,
                          .terminating = std::nullopt}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051"})));
}

TEST_F(KubernetesSourceTest, ReportsOnlyWhenTheSetChanges) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
  json same = MakeSlice("gecd-a", "gecd", kTwoPods);
  same["endpoints"][0]["nodeName"] = "node-2";  // a change the router does not see
  fake_.Apply(same);
  fake_.Apply(MakeSlice("gecd-b", "gecd", {{.addresses = {"10.0.0.1"}}}));  // a duplicate
  fake_.Apply(MakeSlice("gecd-a", "gecd", {{.addresses = {"10.0.0.9"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.9:50051"})));
  EXPECT_EQ(reports_.size(), 2u);
}

TEST_F(KubernetesSourceTest, ASliceWithoutThePortIsSkipped) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  fake_.Apply(MakeSlice("gecd-b", "gecd", {{.addresses = {"10.0.1.1"}}}, "http", 8080));
  Start();
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
  fake_.Apply(MakeSlice("gecd-b", "gecd", {{.addresses = {"10.0.1.2"}}}, "http", 8080));
  fake_.Apply(MakeSlice("gecd-c", "gecd", {{.addresses = {"fd00::5"}}}, "grpc", 50051, "IPv6"));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051", "[fd00::5]:50051"})));
  EXPECT_EQ(counters_.errors.load(), 0u);
}

TEST_F(KubernetesSourceTest, ListPagesFollowContinue) {
  for (int i = 0; i < 5; ++i) {
    fake_.Apply(
        MakeSlice(absl::StrCat("gecd-", i), "gecd", {{.addresses = {absl::StrCat("10.0.0.", i)}}}));
  }
  KubernetesSourceOptions options = Options();
  options.page_size = 2;
  Start(options);
  ASSERT_TRUE(reports_.WaitFor(Ready(
      {"10.0.0.0:50051", "10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051", "10.0.0.4:50051"})));
  ASSERT_TRUE(WaitForWatch());
  const Requests requests = fake_.requests();
  ASSERT_EQ(CountLists(requests), 3u);
  EXPECT_EQ(requests[0].param("continue"), "");
  EXPECT_EQ(requests[1].param("continue"), "2");
  EXPECT_EQ(requests[2].param("continue"), "4");
  EXPECT_EQ(requests[2].param("limit"), "2");
  EXPECT_EQ(reports_.size(), 1u);  // one report for the whole list
}

TEST_F(KubernetesSourceTest, BookmarkMovesTheResourceVersionAndAnEndedWatchResumes) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(WaitForWatch());
  fake_.BumpResourceVersion();  // objects the selector hides changed
  fake_.BumpResourceVersion();
  const std::string bookmarked = std::to_string(fake_.resource_version());
  fake_.Bookmark();
  fake_.EndWatches();  // the server's timeoutSeconds ran out
  ASSERT_TRUE(WaitForWatch(2));
  const Requests requests = fake_.requests();
  EXPECT_EQ(requests.back().param("resourceVersion"), bookmarked);
  EXPECT_EQ(CountLists(requests), 1u);  // resumed, not relisted
  EXPECT_EQ(counters_.watch_restarts.load(), 1u);
  EXPECT_EQ(counters_.errors.load(), 0u);
  // Events still come through the new watch.
  fake_.Apply(MakeSlice("gecd-a", "gecd", {{.addresses = {"10.0.0.7"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.7:50051"})));
}

TEST_F(KubernetesSourceTest, GoneAsHttpStatusRelistsAndSeesWhatWasMissed) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  fake_.Apply(MakeSlice("gecd-b", "gecd", {{.addresses = {"10.0.1.1"}}}));
  Start();
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051", "10.0.1.1:50051"})));
  ASSERT_TRUE(WaitForWatch());
  // The watch breaks and cannot come back for a while; meanwhile gecd-b goes and the history
  // of it is compacted away, so only a new list can tell.
  fake_.FailNext(500, 1 << 20);
  fake_.DropWatches();
  ASSERT_TRUE(fake_.WaitFor([](const Requests& r, int) { return CountWatches(r) >= 2; }));
  fake_.Delete("gecd-b");
  fake_.Compact(/*http_status=*/true);
  fake_.FailNext(0, 0);
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
  EXPECT_EQ(counters_.relists.load(), 1u);
  EXPECT_GE(counters_.errors.load(), 2u);  // the dropped watch, the 500s
  // The new watch starts from the new list's resourceVersion.
  const std::string listed = std::to_string(fake_.resource_version());
  EXPECT_TRUE(fake_.WaitFor([&](const Requests& r, int) {
    return r.back().watch() && r.back().param("resourceVersion") == listed;
  }));
}

TEST_F(KubernetesSourceTest, GoneAsErrorEventRelists) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(WaitForWatch());
  fake_.SendGone();  // an open watch told its resourceVersion is too old
  ASSERT_TRUE(WaitUntil([&] { return counters_.relists.load() == 1; }));
  ASSERT_TRUE(WaitForWatch(2));
  // And a resumed watch that gets the ERROR event at once.
  fake_.Compact(/*http_status=*/false);
  fake_.DropWatches();
  ASSERT_TRUE(WaitUntil([&] { return counters_.relists.load() == 2; }));
  ASSERT_TRUE(WaitForWatch(4));
  EXPECT_EQ(CountLists(fake_.requests()), 3u);
  fake_.Apply(MakeSlice("gecd-a", "gecd", {{.addresses = {"10.0.0.8"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.8:50051"})));
}

TEST_F(KubernetesSourceTest, DroppedWatchResumesFromTheSameResourceVersion) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(WaitForWatch());
  fake_.Apply(MakeSlice("gecd-a", "gecd", {{.addresses = {"10.0.0.3"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.3:50051"})));
  const std::string seen = std::to_string(fake_.resource_version());
  fake_.DropWatches();  // the connection is cut mid-answer
  ASSERT_TRUE(WaitForWatch(2));
  const Requests requests = fake_.requests();
  EXPECT_EQ(requests.back().param("resourceVersion"), seen);
  EXPECT_EQ(CountLists(requests), 1u);
  EXPECT_EQ(counters_.watch_restarts.load(), 1u);
  EXPECT_EQ(counters_.errors.load(), 1u);
  fake_.Apply(MakeSlice("gecd-a", "gecd", {{.addresses = {"10.0.0.4"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.4:50051"})));
}

TEST_F(KubernetesSourceTest, RotatedTokenIsReadAgainAfterA401) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(WaitForWatch());
  WriteFile(token_file_, "token-2\n");  // the kubelet rotated the bound token
  fake_.SetToken("token-2");            // and the old one expired
  fake_.DropWatches();
  ASSERT_TRUE(fake_.WaitFor([](const Requests& r, int) {
    return r.back().watch() && r.back().authorization == "Bearer token-2";
  }));
  fake_.Apply(MakeSlice("gecd-a", "gecd", {{.addresses = {"10.0.0.5"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.5:50051"})));
  const Requests requests = fake_.requests();
  EXPECT_EQ(requests[requests.size() - 2].authorization, "Bearer token-1");  // refused, 401
  EXPECT_EQ(requests.back().authorization, "Bearer token-2");
  EXPECT_EQ(CountLists(requests), 1u);
  EXPECT_EQ(counters_.errors.load(), 2u);  // the dropped watch, the 401
}

TEST_F(KubernetesSourceTest, TokenIsReadAgainEveryTokenRefresh) {
  KubernetesSourceOptions options = Options();
  options.token_refresh = absl::ZeroDuration();  // every request
  fake_.SetToken("");                            // any token will do
  Start(options);
  ASSERT_TRUE(WaitForWatch());
  WriteFile(token_file_, "token-2\n");
  fake_.EndWatches();
  ASSERT_TRUE(WaitForWatch(2));
  EXPECT_EQ(fake_.requests().back().authorization, "Bearer token-2");
  EXPECT_EQ(counters_.errors.load(), 0u);
}

class RefusedTest : public KubernetesSourceTest, public ::testing::WithParamInterface<int> {};

TEST_P(RefusedTest, ListRefusalsAreRetriedWithBackoff) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  fake_.FailNext(GetParam(), 3);
  Start();
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
  EXPECT_EQ(counters_.errors.load(), 3u);
  EXPECT_EQ(counters_.relists.load(), 0u);  // the first list, tried four times
  EXPECT_EQ(reports_.size(), 1u);
}

TEST_P(RefusedTest, WatchRefusalsResumeWithBackoff) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(WaitForWatch());
  fake_.FailNext(GetParam(), 2);
  fake_.EndWatches();
  ASSERT_TRUE(WaitForWatch(4));
  EXPECT_EQ(counters_.errors.load(), 2u);
  EXPECT_EQ(counters_.watch_restarts.load(), 3u);  // ended, refused, refused
  EXPECT_EQ(CountLists(fake_.requests()), 1u);
}

INSTANTIATE_TEST_SUITE_P(Statuses, RefusedTest, ::testing::Values(401, 403, 500));

TEST_F(KubernetesSourceTest, MalformedEventsAreCountedAndRelisted) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
  json bad_slice = MakeSlice("gecd-a", "gecd", kTwoPods);
  bad_slice["endpoints"] = "everything";
  const std::string lines[] = {
      "{not json\n",
      "[1, 2]\n",
      R"({"type":"ADDED"})"
      "\n",
      R"({"type":"RESIZED","object":{}})"
      "\n",
      json{{"type", "MODIFIED"}, {"object", bad_slice}}.dump() + "\n",
      R"({"type":"BOOKMARK","object":{"metadata":{}}})"
      "\n",
      R"({"type":"ERROR","object":{"kind":"Status","code":500,"message":"etcd is sad"}})"
      "\n",
  };
  uint64_t relists = 0;
  for (const std::string& line : lines) {
    ASSERT_TRUE(WaitForWatch(relists + 1)) << line;
    fake_.SendRaw(line);
    ASSERT_TRUE(WaitUntil([&] { return counters_.relists.load() == relists + 1; })) << line;
    ++relists;
    EXPECT_EQ(counters_.errors.load(), relists) << line;
  }
  EXPECT_EQ(reports_.size(), 1u);  // the set never changed
  ASSERT_TRUE(WaitForWatch(relists + 1));
  fake_.Apply(MakeSlice("gecd-a", "gecd", {{.addresses = {"10.0.0.6"}}}));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.6:50051"})));
}

TEST_F(KubernetesSourceTest, AMalformedSliceInAListIsSkipped) {
  json bad_slice = MakeSlice("gecd-b", "gecd", kTwoPods);
  bad_slice["ports"] = 7;
  fake_.Apply(MakeSlice("gecd-a", "gecd", {{.addresses = {"10.0.0.1"}}}));
  fake_.Apply(bad_slice);
  Start();
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051"})));
  EXPECT_EQ(counters_.errors.load(), 1u);
}

// The threads of this process.
size_t ThreadCount() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    ++n;
  }
  return n;
}

TEST_F(KubernetesSourceTest, StopsAtOnceMidWatch) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  Start();
  ASSERT_TRUE(WaitForWatch());
  const size_t threads = ThreadCount();  // the fake server's pool is up by now
  const auto start = std::chrono::steady_clock::now();
  source_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(ThreadCount(), threads - 1);  // the source's own thread joined, nothing left
  EXPECT_TRUE(fake_.WaitFor([](const Requests&, int open) { return open == 0; }));
}

TEST_F(KubernetesSourceTest, StopsAtOnceInBackoff) {
  KubernetesSourceOptions options = Options();
  options.backoff_initial = absl::Minutes(5);
  options.backoff_max = absl::Minutes(5);
  fake_.FailNext(500, 1);
  Start(options);
  ASSERT_TRUE(WaitUntil([&] { return counters_.errors.load() == 1; }));
  const auto start = std::chrono::steady_clock::now();
  source_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

TEST_F(KubernetesSourceTest, InsecureSkipTlsVerifyTrustsAnyServer) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  KubernetesSourceOptions options = Options();
  options.api.ca_file = "";
  options.api.insecure_skip_tls_verify = true;
  Start(options);
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
}

TEST_F(KubernetesSourceTest, AnUntrustedServerCertificateIsAnErrorNotAReport) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  KubernetesSourceOptions options = Options();
  options.api.ca_file = "";  // the system's CAs do not know the test CA
  Start(options);
  ASSERT_TRUE(WaitUntil([&] { return counters_.errors.load() >= 2; }));
  EXPECT_EQ(reports_.size(), 0u);
  EXPECT_TRUE(fake_.requests().empty());  // TLS failed before any request
}

class ClientCertificateTest : public KubernetesSourceTest {
 protected:
  ClientCertificateTest() : KubernetesSourceTest(MutualTls()) {}
  static FakeKubeApi::Options MutualTls() {
    FakeKubeApi::Options options;
    options.token = "";
    options.require_client_cert = true;
    return options;
  }
  static config::KubernetesSection Section(std::string kubeconfig) {
    config::KubernetesSection kube;
    kube.service = "gecd";
    kube.kubeconfig = std::move(kubeconfig);
    return kube;
  }

  std::string Kubeconfig(bool with_cert) {
    auto data = [](const std::string& name) {
      std::ifstream in(gecd::testing::FixturePath("k8s/" + name), std::ios::binary);
      return absl::Base64Escape(std::string(std::istreambuf_iterator<char>(in), {}));
    };
    std::string user = with_cert ? absl::StrCat("    client-certificate-data: ", data("client.crt"),
                                                "\n    client-key-data: ", data("client.key"))
                                 : "    token: unused";
    const std::string path = dir_.path() + "/kubeconfig";
    WriteFile(path, absl::StrCat("apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                                 "clusters:\n- name: fake\n  cluster:\n    server: ",
                                 fake_.url(), "\n    certificate-authority-data: ", data("ca.crt"),
                                 "\ncontexts:\n- name: test\n  context: {cluster: fake, user: "
                                 "me, namespace: gec}\nusers:\n- name: me\n  user:\n",
                                 user, "\n"));
    return path;
  }
};

TEST_F(ClientCertificateTest, KubeconfigWithClientCertificateData) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  const config::KubernetesSection kube = Section(Kubeconfig(true));
  absl::StatusOr<KubernetesSourceOptions> options = ResolveKubernetesOptions(kube, {});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->namespace_, "gec");
  options->backoff_initial = absl::Milliseconds(5);
  Start(*std::move(options));
  ASSERT_TRUE(reports_.WaitFor(Ready({"10.0.0.1:50051", "10.0.0.2:50051"})));
}

TEST_F(KubernetesSourceTest, OnlyTheGivenCaIsTrusted) {
  fake_.Apply(MakeSlice("gecd-a", "gecd", kTwoPods));
  KubernetesSourceOptions options = Options();
  options.api.ca_file = gecd::testing::FixturePath("k8s/client.crt");  // not the server's CA
  Start(options);
  ASSERT_TRUE(WaitUntil([&] { return counters_.errors.load() >= 2; }));
  EXPECT_EQ(reports_.size(), 0u);
}

TEST_F(ClientCertificateTest, WithoutTheCertificateTheHandshakeFails) {
  const config::KubernetesSection kube = Section(Kubeconfig(false));
  absl::StatusOr<KubernetesSourceOptions> options = ResolveKubernetesOptions(kube, {});
  ASSERT_TRUE(options.ok()) << options.status();
  options->backoff_initial = absl::Milliseconds(5);
  options->backoff_max = absl::Milliseconds(20);
  Start(*std::move(options));
  ASSERT_TRUE(WaitUntil([&] { return counters_.errors.load() >= 2; }));
  EXPECT_EQ(reports_.size(), 0u);
}

TEST(CreateKubernetesSource, OutsideAClusterWithoutKubeconfigIsAnError) {
  if (std::getenv("KUBERNETES_SERVICE_HOST") != nullptr) GTEST_SKIP() << "inside a cluster";
  DiscoveryCounters counters;
  config::KubernetesSection kube;
  kube.service = "gecd";
  absl::StatusOr<std::unique_ptr<EndpointSource>> source = CreateKubernetesSource(kube, &counters);
  ASSERT_FALSE(source.ok());
  EXPECT_THAT(std::string(source.status().message()),
              ::testing::HasSubstr("set route.kubernetes.kubeconfig"));
}

}  // namespace
}  // namespace gecd::route
