#ifndef GECD_TESTS_ROUTE_FAKE_KUBE_API_H_
#define GECD_TESTS_ROUTE_FAKE_KUBE_API_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "httplib.h"
#include "nlohmann/json.hpp"

namespace gecd::testing {

// A Kubernetes API server for the route tests, on 127.0.0.1 over HTTPS (the certificates of
// tests/fixtures/k8s, made by its make_certs.sh). It serves the discovery.k8s.io/v1
// EndpointSlices of one namespace as the real one does: list (labelSelector, limit/continue,
// EndpointSliceList with metadata.resourceVersion) and watch (from a resourceVersion: the
// history after it, then live events as newline-delimited JSON in a chunked answer, BOOKMARKs
// when asked for, 410 for a resourceVersion older than the history; an idle one gets a blank
// line every 50 ms, as the way to notice a client that left), behind a bearer token
// (or a client certificate). Faults come on demand. Owns the httplib server and its thread.
class FakeKubeApi {
 public:
  struct Options {
    std::string namespace_ = "gec";
    std::string token = "token-1";     // "" = no token needed
    bool require_client_cert = false;  // signed by the fixture CA
  };

  // One request as the server read it.
  struct Request {
    std::string path;
    std::multimap<std::string, std::string> params;  // decoded query
    std::string authorization;
    bool watch() const { return params.count("watch") > 0; }
    std::string param(const std::string& key) const;
  };

  explicit FakeKubeApi(Options options);
  FakeKubeApi() : FakeKubeApi(Options()) {}
  ~FakeKubeApi();
  FakeKubeApi(const FakeKubeApi&) = delete;
  FakeKubeApi& operator=(const FakeKubeApi&) = delete;

  std::string url() const;  // https://127.0.0.1:PORT

  // Changes to the namespace's slices, each at the next resourceVersion: ADDED (new) or
  // MODIFIED, DELETED; open watches whose selector matches get the event.
  void Apply(nlohmann::json slice);
  void Delete(const std::string& name);
  // Something no watch sees changed (another kind of object): the resourceVersion moves on.
  void BumpResourceVersion();
  uint64_t resource_version() const;

  // To the open watches: a BOOKMARK at the current resourceVersion (to those that allowed
  // them), a line as is, an ERROR event with a 410 Status; then a clean end of the answer, or
  // the connection cut mid-answer.
  void Bookmark();
  void SendRaw(std::string line);
  void SendGone();
  void EndWatches();
  void DropWatches();
  // The history up to now is gone (the resourceVersion moves on): a watch from an older one
  // gets 410 Gone, as the HTTP status or (http_status false) as an ERROR event in a 200 answer.
  void Compact(bool http_status);

  void SetToken(std::string token);
  // The next `count` requests get `status` with a Status body.
  void FailNext(int status, int count);

  std::vector<Request> requests() const;
  int open_watches() const;
  // Waits (up to `timeout`) until `done(requests, open watches)` holds; false on timeout.
  bool WaitFor(const std::function<bool(const std::vector<Request>&, int)>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  struct Watcher {
    std::string selector;
    bool bookmarks = false;
    std::deque<std::string> lines;
    bool end = false;
    bool drop = false;
  };
  struct Event {
    uint64_t resource_version;
    std::string service;  // the slice's kubernetes.io/service-name
    std::string line;
  };

  void Serve(const httplib::Request& request, httplib::Response& response);
  void List(const Request& request, httplib::Response& response);   // mu_ held
  void Watch(const Request& request, httplib::Response& response);  // mu_ held
  void Publish(const std::string& type, nlohmann::json slice);      // mu_ held
  void ToWatches(const std::function<void(Watcher&)>& change);

  const Options options_;
  std::unique_ptr<httplib::SSLServer> server_;
  int port_ = 0;
  std::thread thread_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool stopping_ = false;
  std::string token_;
  uint64_t resource_version_ = 1;
  uint64_t compacted_ = 0;  // watches from below this get 410
  bool gone_as_http_ = true;
  int fail_status_ = 0;
  int fail_count_ = 0;
  std::map<std::string, nlohmann::json> slices_;
  std::vector<Event> history_;
  std::list<std::shared_ptr<Watcher>> watchers_;
  std::vector<Request> requests_;
};

// One endpoint of a slice; nullopt conditions are left out of the JSON (nil).
struct SliceEndpoint {
  std::vector<std::string> addresses;
  std::optional<bool> ready = true;
  std::optional<bool> serving = true;
  std::optional<bool> terminating = false;
};

// An EndpointSlice of `service` as the EndpointSlice controller writes it: labels, addressType,
// the endpoints with conditions, one TCP port `port_name` = `port`.
nlohmann::json MakeSlice(const std::string& name, const std::string& service,
                         const std::vector<SliceEndpoint>& endpoints,
                         const std::string& port_name = "grpc", int port = 50051,
                         const std::string& address_type = "IPv4");

}  // namespace gecd::testing

#endif  // GECD_TESTS_ROUTE_FAKE_KUBE_API_H_
