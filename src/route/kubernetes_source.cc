#include "route/kubernetes_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "route/backoff.h"
#include "spdlog/spdlog.h"

namespace gecd::route {
namespace {

using nlohmann::json;

// A watch that ends (or is Gone) this soon without a single event was refused in effect (a
// server or proxy that closes at once, a list from a lagging cache): it waits the back-off
// before the next request, so that nothing spins.
constexpr absl::Duration kShortWatch = absl::Seconds(1);

// Percent-encoding of a query value (RFC 3986 unreserved characters pass).
std::string QueryEscape(absl::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// metadata.resourceVersion of an object, "" when absent or not a string.
std::string ResourceVersion(const json& object) {
  const auto metadata = object.find("metadata");
  if (metadata == object.end() || !metadata->is_object()) return "";
  const auto rv = metadata->find("resourceVersion");
  return rv != metadata->end() && rv->is_string() ? rv->get<std::string>() : "";
}

// A Status object's message, or the start of a body that is not one.
std::string StatusMessage(const std::string& body) {
  const json status = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status.is_object()) {
    const auto message = status.find("message");
    if (message != status.end() && message->is_string()) return message->get<std::string>();
  }
  return body.substr(0, 200);
}

size_t CountDraining(const std::vector<DiscoveredEndpoint>& endpoints) {
  return std::count_if(endpoints.begin(), endpoints.end(),
                       [](const DiscoveredEndpoint& e) { return e.draining; });
}

}  // namespace

KubernetesSource::KubernetesSource(KubernetesSourceOptions options, DiscoveryCounters* counters)
    : options_(std::move(options)),
      counters_(counters),
      what_(absl::StrCat(options_.namespace_, "/", options_.service)),
      client_(options_.api, options_.token_refresh) {}

KubernetesSource::~KubernetesSource() {
  stop_.Notify();
  client_.Interrupt();
  if (thread_.joinable()) thread_.join();
}

absl::Status KubernetesSource::Start(UpdateCallback on_update) {
  if (thread_.joinable()) return absl::FailedPreconditionError("already started");
  on_update_ = std::move(on_update);
  spdlog::info("kubernetes discovery: watching the EndpointSlices of service {} (port {}) at {}",
               what_, options_.port, options_.api.server);
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

std::string KubernetesSource::SlicesPath() const {
  return absl::StrCat("/apis/discovery.k8s.io/v1/namespaces/", QueryEscape(options_.namespace_),
                      "/endpointslices?labelSelector=",
                      QueryEscape(absl::StrCat("kubernetes.io/service-name=", options_.service)));
}

bool KubernetesSource::Sleep(absl::Duration d) { return !stop_.WaitForNotificationWithTimeout(d); }

void KubernetesSource::Fail(const absl::Status& status) {
  counters_->errors.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("kubernetes discovery {}: {}", what_, std::string(status.message()));
}

void KubernetesSource::Run() {
  Backoff backoff(options_.backoff_initial, options_.backoff_max);
  bool listed_once = false;
  std::string resource_version;  // "" = list first
  while (!stop_.HasBeenNotified()) {
    if (resource_version.empty()) {
      absl::StatusOr<std::string> listed = List();
      if (absl::IsCancelled(listed.status())) return;
      if (!listed.ok()) {
        Fail(listed.status());
        if (!Sleep(backoff.Next())) return;
        continue;
      }
      if (listed_once) counters_->relists.fetch_add(1, std::memory_order_relaxed);
      listed_once = true;
      ReportIfChanged("list");
      resource_version = *std::move(listed);
      backoff.Reset();
    }
    const absl::Time opened = absl::Now();
    bool saw_event = false;
    const WatchEnd end = Watch(&resource_version, &saw_event);
    if (saw_event) backoff.Reset();
    switch (end) {
      case WatchEnd::kStopped:
        return;
      case WatchEnd::kGone:  // too old to resume: the state is listed again, at once unless
                             // the list before was already too old (a lagging cache)
        spdlog::info("kubernetes discovery {}: resourceVersion {} is gone (410); listing again",
                     what_, resource_version);
        resource_version.clear();
        if (!saw_event && absl::Now() - opened < kShortWatch && !Sleep(backoff.Next())) return;
        break;
      case WatchEnd::kEnded:
        counters_->watch_restarts.fetch_add(1, std::memory_order_relaxed);
        spdlog::debug("kubernetes discovery {}: the watch ended; resuming from {}", what_,
                      resource_version);
        if (!saw_event && absl::Now() - opened < kShortWatch && !Sleep(backoff.Next())) return;
        break;
      case WatchEnd::kFailed:  // logged and counted; resumes from the same resourceVersion
        counters_->watch_restarts.fetch_add(1, std::memory_order_relaxed);
        if (!Sleep(backoff.Next())) return;
        break;
      case WatchEnd::kResync:  // logged and counted: what was missed is unknown, so relist
        resource_version.clear();
        if (!Sleep(backoff.Next())) return;
        break;
    }
  }
}

absl::Status KubernetesSource::HttpError(const KubeResponse& response, absl::string_view what) {
  std::string detail = StatusMessage(response.body);
  switch (response.status) {
    case 401:
      client_.RefreshToken();
      return absl::UnauthenticatedError(absl::StrCat(
          what, ": 401 Unauthorized (the token is re-read before the next try): ", detail));
    case 403:
      return absl::PermissionDeniedError(
          absl::StrCat(what,
                       ": 403 Forbidden (the router's account needs get, list and watch on "
                       "endpointslices in discovery.k8s.io, namespace ",
                       options_.namespace_, "): ", detail));
    default:
      return absl::UnavailableError(absl::StrCat(what, ": HTTP ", response.status, ": ", detail));
  }
}

absl::StatusOr<std::string> KubernetesSource::List() {
  SliceSet fresh;
  std::string resource_version;
  std::string continue_token;
  int pages = 0;
  do {
    std::string path = absl::StrCat(SlicesPath(), "&limit=", options_.page_size);
    if (!continue_token.empty()) absl::StrAppend(&path, "&continue=", QueryEscape(continue_token));
    absl::StatusOr<KubeResponse> response = client_.Get(path, options_.list_timeout);
    if (!response.ok()) return response.status();
    if (response->status != 200) return HttpError(*response, "list");
    const json list = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (!list.is_object()) return absl::DataLossError("list: the answer is not a JSON object");
    const auto items = list.find("items");
    if (items == list.end() || !(items->is_array() || items->is_null())) {
      return absl::DataLossError("list: EndpointSliceList.items is not an array");
    }
    resource_version = ResourceVersion(list);
    if (resource_version.empty()) {
      return absl::DataLossError("list: EndpointSliceList.metadata.resourceVersion is missing");
    }
    continue_token.clear();
    const json& metadata = list["metadata"];  // an object: it has the resourceVersion
    const auto next = metadata.find("continue");
    if (next != metadata.end() && next->is_string()) continue_token = next->get<std::string>();
    if (items->is_array()) {
      for (const json& item : *items) {
        absl::StatusOr<ParsedSlice> slice = ParseEndpointSlice(item, options_.port);
        if (!slice.ok()) {  // one bad slice must not hide the others
          Fail(absl::DataLossError(absl::StrCat("list: ", slice.status().message(), "; skipped")));
          continue;
        }
        fresh.Upsert(*std::move(slice));
      }
    }
    ++pages;
  } while (!continue_token.empty() && !stop_.HasBeenNotified());
  if (stop_.HasBeenNotified()) return absl::CancelledError("stopping");
  slices_ = std::move(fresh);
  std::set<std::string> ignored;  // logged when newly so, as in Upsert
  for (const auto& [name, slice] : slices_.slices()) {
    if (slice.ignored.empty()) continue;
    if (ignored_logged_.count(name) == 0) {
      spdlog::warn("kubernetes discovery {}: EndpointSlice {} ignored: {}", what_, name,
                   slice.ignored);
    }
    ignored.insert(name);
  }
  ignored_logged_ = std::move(ignored);
  spdlog::debug("kubernetes discovery {}: listed {} slices ({} pages) at resourceVersion {}", what_,
                slices_.size(), pages, resource_version);
  return resource_version;
}

KubernetesSource::WatchEnd KubernetesSource::Watch(std::string* resource_version, bool* saw_event) {
  const std::string path =
      absl::StrCat(SlicesPath(), "&watch=1&allowWatchBookmarks=true&resourceVersion=",
                   QueryEscape(*resource_version), "&timeoutSeconds=", options_.watch_timeout_s);
  WatchEnd end = WatchEnd::kEnded;
  absl::StatusOr<KubeResponse> response =
      client_.Stream(path, absl::Seconds(options_.watch_timeout_s) + options_.list_timeout,
                     [&](absl::string_view line) {
                       const bool more = OnEvent(line, resource_version, &end);
                       *saw_event = *saw_event || more;  // progress: a change or a bookmark
                       return more;
                     });
  if (stop_.HasBeenNotified() || absl::IsCancelled(response.status())) return WatchEnd::kStopped;
  if (!response.ok()) {
    Fail(absl::Status(response.status().code(),
                      absl::StrCat("watch: ", response.status().message())));
    return WatchEnd::kFailed;
  }
  if (response->status == 410) return WatchEnd::kGone;
  if (response->status != 200) {
    Fail(HttpError(*response, "watch"));
    return WatchEnd::kFailed;
  }
  return end;
}

bool KubernetesSource::OnEvent(absl::string_view line, std::string* resource_version,
                               WatchEnd* end) {
  auto malformed = [&](absl::string_view why) {
    Fail(absl::DataLossError(absl::StrCat("watch: a malformed event (", why,
                                          "); listing again: ", line.substr(0, 200))));
    *end = WatchEnd::kResync;
    return false;
  };
  const json event = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!event.is_object()) return malformed("not a JSON object");
  const auto type_it = event.find("type");
  const auto object_it = event.find("object");
  if (type_it == event.end() || !type_it->is_string()) return malformed("no type");
  if (object_it == event.end() || !object_it->is_object()) return malformed("no object");
  const std::string type = type_it->get<std::string>();
  const json& object = *object_it;

  if (type == "ERROR") {  // a Status object: 410 Gone, or another failure
    const auto code = object.find("code");
    if (code != object.end() && code->is_number_integer() && code->get<int64_t>() == 410) {
      *end = WatchEnd::kGone;
      return false;
    }
    Fail(absl::UnavailableError(
        absl::StrCat("watch: an ERROR event, listing again: ", StatusMessage(object.dump()))));
    *end = WatchEnd::kResync;
    return false;
  }
  const std::string rv = ResourceVersion(object);
  if (type == "BOOKMARK") {
    if (rv.empty()) return malformed("a BOOKMARK without metadata.resourceVersion");
    *resource_version = rv;
    return true;
  }
  if (type != "ADDED" && type != "MODIFIED" && type != "DELETED") {
    return malformed(absl::StrCat("type ", type));
  }
  absl::StatusOr<ParsedSlice> slice = ParseEndpointSlice(object, options_.port);
  if (!slice.ok()) return malformed(slice.status().message());
  if (!rv.empty()) *resource_version = rv;
  const std::string why = absl::StrCat(type, " ", slice->name);
  if (type == "DELETED") {
    Erase(slice->name);
  } else {
    Upsert(*std::move(slice));
  }
  ReportIfChanged(why);
  return true;
}

void KubernetesSource::Upsert(ParsedSlice slice) {
  if (slice.ignored.empty()) {
    ignored_logged_.erase(slice.name);
  } else if (ignored_logged_.insert(slice.name).second) {
    spdlog::warn("kubernetes discovery {}: EndpointSlice {} ignored: {}", what_, slice.name,
                 slice.ignored);
  }
  slices_.Upsert(std::move(slice));
}

void KubernetesSource::Erase(const std::string& name) {
  ignored_logged_.erase(name);
  slices_.Erase(name);
}

void KubernetesSource::ReportIfChanged(absl::string_view why) {
  std::vector<DiscoveredEndpoint> merged = slices_.Merged();
  if (reported_.has_value() && merged == *reported_) return;
  spdlog::info("kubernetes discovery {}: {} endpoints ({} draining) from {} slices, after {}",
               what_, merged.size(), CountDraining(merged), slices_.size(), std::string(why));
  reported_ = merged;
  counters_->updates.fetch_add(1, std::memory_order_relaxed);
  on_update_(std::move(merged));
}

absl::StatusOr<KubernetesSourceOptions> ResolveKubernetesOptions(
    const config::KubernetesSection& kube, const InClusterEnvironment& in_cluster) {
  KubernetesSourceOptions options;
  const bool from_kubeconfig = !kube.kubeconfig.empty();
  absl::StatusOr<KubeApiConfig> api =
      from_kubeconfig ? LoadKubeconfig(kube.kubeconfig) : InClusterConfig(in_cluster);
  if (!api.ok()) return api.status();
  options.api = *std::move(api);
  options.namespace_ = !kube.namespace_.empty() ? kube.namespace_ : options.api.namespace_;
  if (options.namespace_.empty()) {
    if (!from_kubeconfig) {
      return absl::FailedPreconditionError(absl::StrCat(
          "route.kubernetes.namespace: not set, and the service account has no namespace file (",
          in_cluster.service_account_dir, "/namespace)"));
    }
    options.namespace_ = "default";  // kubectl's rule for a context without one
  }
  options.service = kube.service;
  options.port = kube.port;
  options.token_refresh = absl::Seconds(kube.token_refresh_s);
  return options;
}

absl::StatusOr<std::unique_ptr<EndpointSource>> CreateKubernetesSource(
    const config::KubernetesSection& kube, DiscoveryCounters* counters) {
  absl::StatusOr<KubernetesSourceOptions> options =
      ResolveKubernetesOptions(kube, InClusterEnvironment::FromProcess());
  if (!options.ok()) return options.status();
  return std::make_unique<KubernetesSource>(*std::move(options), counters);
}

}  // namespace gecd::route
