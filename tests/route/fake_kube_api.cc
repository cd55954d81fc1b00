#include "route/fake_kube_api.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "testing/test_paths.h"

namespace gecd::testing {
namespace {

using nlohmann::json;

constexpr char kServiceLabel[] = "kubernetes.io/service-name";

json StatusObject(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

void Refuse(httplib::Response& res, int code, const std::string& reason,
            const std::string& message) {
  res.status = code;
  res.set_content(StatusObject(code, reason, message).dump(), "application/json");
}

std::string ServiceOf(const json& slice) {
  const json& labels = slice["metadata"]["labels"];
  return labels.is_object() && labels.contains(kServiceLabel)
             ? labels[kServiceLabel].get<std::string>()
             : "";
}

std::string EventLine(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump() + "\n";
}

// labelSelector: only "kubernetes.io/service-name=NAME", the form the source sends.
bool SelectedService(const FakeKubeApi::Request& request, std::string* service) {
  const std::string selector = request.param("labelSelector");
  const std::string prefix = std::string(kServiceLabel) + "=";
  if (selector.rfind(prefix, 0) != 0) return false;
  *service = selector.substr(prefix.size());
  return true;
}

}  // namespace

std::string FakeKubeApi::Request::param(const std::string& key) const {
  const auto it = params.find(key);
  return it == params.end() ? "" : it->second;
}

FakeKubeApi::FakeKubeApi(Options options) : options_(std::move(options)), token_(options_.token) {
  const std::string cert = FixturePath("k8s/server.crt");
  const std::string key = FixturePath("k8s/server.key");
  server_ = options_.require_client_cert
                ? std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str(),
                                                       FixturePath("k8s/ca.crt").c_str())
                : std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str());
  if (!server_->is_valid()) throw std::runtime_error("FakeKubeApi: the TLS fixtures do not load");
  server_->set_keep_alive_timeout(1);
  server_->set_tcp_nodelay(true);  // headers and body in separate writes: no Nagle wait
  server_->Get(".*",
               [this](const httplib::Request& req, httplib::Response& res) { Serve(req, res); });
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) throw std::runtime_error("FakeKubeApi: cannot bind 127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() before the accept loop runs would not end it.
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

FakeKubeApi::~FakeKubeApi() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  server_->stop();
  thread_.join();
}

std::string FakeKubeApi::url() const { return "https://127.0.0.1:" + std::to_string(port_); }

void FakeKubeApi::Serve(const httplib::Request& req, httplib::Response& res) {
  std::unique_lock lock(mu_);
  Request request{.path = req.path,
                  .params = {req.params.begin(), req.params.end()},
                  .authorization = req.get_header_value("Authorization")};
  requests_.push_back(request);
  cv_.notify_all();
  if (fail_count_ > 0) {
    --fail_count_;
    Refuse(res, fail_status_, "InternalError", "injected failure");
    return;
  }
  if (!token_.empty() && request.authorization != "Bearer " + token_) {
    Refuse(res, 401, "Unauthorized", "Unauthorized");
    return;
  }
  const std::string prefix = "/apis/discovery.k8s.io/v1/namespaces/" + options_.namespace_;
  if (req.path != prefix + "/endpointslices") {
    Refuse(res, 404, "NotFound", "no such path: " + req.path);
    return;
  }
  if (request.watch()) {
    Watch(request, res);
  } else {
    List(request, res);
  }
}

void FakeKubeApi::List(const Request& request, httplib::Response& res) {
  std::string service;
  if (!SelectedService(request, &service)) {
    Refuse(res, 400, "BadRequest", "labelSelector must be " + std::string(kServiceLabel) + "=NAME");
    return;
  }
  std::vector<json> items;
  for (const auto& [name, slice] : slices_) {
    if (ServiceOf(slice) == service) items.push_back(slice);
  }
  // Pages: "continue" is the index of the next item (a real server's is opaque).
  size_t begin = 0;
  if (const std::string token = request.param("continue"); !token.empty()) {
    begin = std::min<size_t>(std::stoul(token), items.size());
  }
  size_t end = items.size();
  if (const std::string limit = request.param("limit"); !limit.empty()) {
    end = std::min(items.size(), begin + std::stoul(limit));
  }
  json metadata = {{"resourceVersion", std::to_string(resource_version_)}};
  if (end < items.size()) metadata["continue"] = std::to_string(end);
  json list = {{"kind", "EndpointSliceList"},
               {"apiVersion", "discovery.k8s.io/v1"},
               {"metadata", metadata},
               {"items", json::array()}};
  for (size_t i = begin; i < end; ++i) list["items"].push_back(items[i]);
  res.set_content(list.dump(), "application/json");
}

void FakeKubeApi::Watch(const Request& request, httplib::Response& res) {
  auto watcher = std::make_shared<Watcher>();
  if (!SelectedService(request, &watcher->selector)) {
    Refuse(res, 400, "BadRequest", "labelSelector must be " + std::string(kServiceLabel) + "=NAME");
    return;
  }
  watcher->bookmarks = request.param("allowWatchBookmarks") == "true";
  const uint64_t from = std::stoull("0" + request.param("resourceVersion"));
  if (from < compacted_) {
    const std::string message = "too old resource version: " + std::to_string(from) + " (" +
                                std::to_string(compacted_) + ")";
    if (gone_as_http_) {
      Refuse(res, 410, "Expired", message);
      return;
    }
    watcher->lines.push_back(EventLine("ERROR", StatusObject(410, "Expired", message)));
    watcher->end = true;
  } else {
    for (const Event& e : history_) {
      if (e.resource_version > from && e.service == watcher->selector) {
        watcher->lines.push_back(e.line);
      }
    }
  }
  watchers_.push_back(watcher);
  res.set_chunked_content_provider(
      "application/json",
      [this, watcher](size_t, httplib::DataSink& sink) {
        std::unique_lock lock(mu_);
        const bool woken = cv_.wait_for(lock, std::chrono::milliseconds(50), [&] {
          return !watcher->lines.empty() || watcher->end || watcher->drop || stopping_;
        });
        std::deque<std::string> lines;
        lines.swap(watcher->lines);
        // An idle watch writes a blank line (which clients skip) now and then: a write is how
        // httplib notices a client that went away, and such a watch must not hold a thread.
        if (!woken) lines.push_back("\n");
        const bool drop = watcher->drop || stopping_;
        const bool end = watcher->end;
        lock.unlock();
        for (const std::string& line : lines) {
          if (!sink.write(line.data(), line.size())) return false;
        }
        if (drop) return false;  // no terminating chunk: the client sees a cut stream
        if (end) sink.done();
        return true;
      },
      [this, watcher](bool) {
        std::lock_guard lock(mu_);
        watchers_.remove(watcher);
        cv_.notify_all();
      });
}

void FakeKubeApi::Publish(const std::string& type, json slice) {
  ++resource_version_;
  slice["metadata"]["resourceVersion"] = std::to_string(resource_version_);
  const std::string service = ServiceOf(slice);
  const std::string line = EventLine(type, slice);
  history_.push_back({resource_version_, service, line});
  for (const auto& w : watchers_) {
    if (w->selector == service && !w->end) w->lines.push_back(line);
  }
  const std::string name = slice["metadata"]["name"].get<std::string>();
  if (type == "DELETED") {
    slices_.erase(name);
  } else {
    slices_[name] = std::move(slice);
  }
  cv_.notify_all();
}

void FakeKubeApi::Apply(json slice) {
  std::lock_guard lock(mu_);
  const bool known = slices_.count(slice["metadata"]["name"].get<std::string>()) > 0;
  Publish(known ? "MODIFIED" : "ADDED", std::move(slice));
}

void FakeKubeApi::Delete(const std::string& name) {
  std::lock_guard lock(mu_);
  const auto it = slices_.find(name);
  if (it != slices_.end()) Publish("DELETED", it->second);
}

void FakeKubeApi::BumpResourceVersion() {
  std::lock_guard lock(mu_);
  ++resource_version_;
}

uint64_t FakeKubeApi::resource_version() const {
  std::lock_guard lock(mu_);
  return resource_version_;
}

void FakeKubeApi::ToWatches(const std::function<void(Watcher&)>& change) {
  std::lock_guard lock(mu_);
  for (const auto& w : watchers_) change(*w);
  cv_.notify_all();
}

void FakeKubeApi::Bookmark() {
  const std::string rv = std::to_string(resource_version());
  const std::string line =
      EventLine("BOOKMARK", {{"kind", "EndpointSlice"},
                             {"apiVersion", "discovery.k8s.io/v1"},
                             {"metadata", {{"resourceVersion", rv}}},
                             {"addressType", "IPv4"},  // a bookmark's object is the type's skeleton
                             {"endpoints", nullptr}});
  ToWatches([&](Watcher& w) {
    if (w.bookmarks) w.lines.push_back(line);
  });
}

void FakeKubeApi::SendRaw(std::string line) {
  ToWatches([&](Watcher& w) { w.lines.push_back(line); });
}

void FakeKubeApi::SendGone() {
  SendRaw(EventLine("ERROR", StatusObject(410, "Expired", "too old resource version")));
}

void FakeKubeApi::EndWatches() {
  ToWatches([](Watcher& w) { w.end = true; });
}

void FakeKubeApi::DropWatches() {
  ToWatches([](Watcher& w) { w.drop = true; });
}

void FakeKubeApi::Compact(bool http_status) {
  std::lock_guard lock(mu_);
  compacted_ = ++resource_version_;  // a list from now on is at compacted_, a watch from it fine
  gone_as_http_ = http_status;
  history_.clear();
}

void FakeKubeApi::SetToken(std::string token) {
  std::lock_guard lock(mu_);
  token_ = std::move(token);
}

void FakeKubeApi::FailNext(int status, int count) {
  std::lock_guard lock(mu_);
  fail_status_ = status;
  fail_count_ = count;
}

std::vector<FakeKubeApi::Request> FakeKubeApi::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

int FakeKubeApi::open_watches() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(watchers_.size());
}

bool FakeKubeApi::WaitFor(const std::function<bool(const std::vector<Request>&, int)>& done,
                          std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout,
                      [&] { return done(requests_, static_cast<int>(watchers_.size())); });
}

json MakeSlice(const std::string& name, const std::string& service,
               const std::vector<SliceEndpoint>& endpoints, const std::string& port_name, int port,
               const std::string& address_type) {
  json eps = json::array();
  for (const SliceEndpoint& e : endpoints) {
    json conditions = json::object();
    if (e.ready.has_value()) conditions["ready"] = *e.ready;
    if (e.serving.has_value()) conditions["serving"] = *e.serving;
    if (e.terminating.has_value()) conditions["terminating"] = *e.terminating;
    eps.push_back(
        {{"addresses", e.addresses},
         {"conditions", conditions},
         {"nodeName", "node-1"},
         {"targetRef", {{"kind", "Pod"}, {"name", name + "-pod"}, {"namespace", "gec"}}}});
  }
  return {{"kind", "EndpointSlice"},
          {"apiVersion", "discovery.k8s.io/v1"},
          {"metadata",
           {{"name", name},
            {"namespace", "gec"},
            {"labels",
             {{kServiceLabel, service},
              {"endpointslice.kubernetes.io/managed-by", "endpointslice-controller.k8s.io"}}},
            {"generateName", service + "-"}}},
          {"addressType", address_type},
          {"endpoints", eps},
          {"ports", json::array({{{"name", port_name}, {"port", port}, {"protocol", "TCP"}}})}};
}

}  // namespace gecd::testing
