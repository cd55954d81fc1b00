#ifndef GECD_ROUTE_KUBERNETES_SOURCE_H_
#define GECD_ROUTE_KUBERNETES_SOURCE_H_

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "config/config.h"
#include "route/endpoint_slices.h"
#include "route/endpoint_source.h"
#include "route/kube_api_client.h"
#include "route/kube_config.h"

namespace gecd::route {

// Everything the Kubernetes source needs, resolved: the API server and the Service.
struct KubernetesSourceOptions {
  KubeApiConfig api;
  std::string namespace_;
  std::string service;
  std::string port = "grpc";  // the slice port's name, or its number
  absl::Duration token_refresh = absl::Seconds(60);
  int watch_timeout_s = 300;  // timeoutSeconds of each watch; the server ends it then
  int page_size = 500;        // limit of each list page (continue for the rest)
  absl::Duration list_timeout = absl::Seconds(30);
  absl::Duration backoff_initial = absl::Milliseconds(500);  // doubling, with jitter, up to
  absl::Duration backoff_max = absl::Seconds(30);            // this; reset after a success
};

// route.endpoints.source: kubernetes — the EndpointSlices of one Service, by list + watch
// (kubernetes.io/service-name=SERVICE), merged, on a thread of its own. Owns that thread and
// the API client. Lists, then watches from the list's resourceVersion with bookmarks, keeping
// the newest resourceVersion; a watch that ends is re-opened from it, 410 Gone relists, any
// other failure retries with back-off. Reports only when the merged set changes.
class KubernetesSource final : public EndpointSource {
 public:
  // `counters` outlives the source.
  KubernetesSource(KubernetesSourceOptions options, DiscoveryCounters* counters);
  // Stops at once, even mid-request (the client's poll is woken), and joins.
  ~KubernetesSource() override;
  absl::Status Start(UpdateCallback on_update) override;

 private:
  enum class WatchEnd { kEnded, kGone, kFailed, kResync, kStopped };

  void Run();
  // One full list, every page; replaces the slices. Returns its resourceVersion.
  absl::StatusOr<std::string> List();
  // One watch from *resource_version, which it advances.
  WatchEnd Watch(std::string* resource_version, bool* saw_event);
  // An event line; false ends the watch with *end.
  bool OnEvent(absl::string_view line, std::string* resource_version, WatchEnd* end);
  // The HTTP error of a refused request (401 also makes the client re-read its token).
  absl::Status HttpError(const KubeResponse& response, absl::string_view what);
  void Upsert(ParsedSlice slice);
  void Erase(const std::string& name);
  void ReportIfChanged(absl::string_view why);
  void Fail(const absl::Status& status);
  bool Sleep(absl::Duration d);  // false: stopping
  std::string SlicesPath() const;

  const KubernetesSourceOptions options_;
  DiscoveryCounters* const counters_;
  const std::string what_;  // "namespace/service", for the log
  KubeApiClient client_;
  absl::Notification stop_;
  UpdateCallback on_update_;
  // The Run thread's alone.
  SliceSet slices_;
  std::set<std::string> ignored_logged_;  // slices ignored (no such port), logged once each
  std::optional<std::vector<DiscoveredEndpoint>> reported_;
  std::thread thread_;
};

// The options route.kubernetes resolves to: the kubeconfig file, or else in-cluster
// configuration from `in_cluster` (InClusterEnvironment::FromProcess() in a pod). The
// namespace is route.kubernetes.namespace, else the pod's or the kubeconfig context's, else
// (kubeconfig) "default". Errors name the key.
absl::StatusOr<KubernetesSourceOptions> ResolveKubernetesOptions(
    const config::KubernetesSection& kube, const InClusterEnvironment& in_cluster);

// The source route.kubernetes configures (in-cluster from this process's environment and
// kServiceAccountDir), not started.
absl::StatusOr<std::unique_ptr<EndpointSource>> CreateKubernetesSource(
    const config::KubernetesSection& kube, DiscoveryCounters* counters);

}  // namespace gecd::route

#endif  // GECD_ROUTE_KUBERNETES_SOURCE_H_
