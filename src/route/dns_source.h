#ifndef GECD_ROUTE_DNS_SOURCE_H_
#define GECD_ROUTE_DNS_SOURCE_H_

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "route/endpoint_source.h"

namespace gecd::route {

// route.endpoints.source: dns — "name:port" resolved (getaddrinfo: A and AAAA) every
// route.dns_refresh_s, each address an endpoint: a headless Service's records. A failed
// resolution is logged and counted and keeps the last set. Owns the resolving thread.
class DnsSource final : public EndpointSource {
 public:
  // `host` without the brackets of "[v6]:port".
  DnsSource(std::string host, int port, std::chrono::milliseconds refresh,
            DiscoveryCounters* counters);
  ~DnsSource() override;
  absl::Status Start(UpdateCallback on_update) override;

 private:
  void Loop(UpdateCallback on_update) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string host_;
  const std::string port_;
  const std::chrono::milliseconds refresh_;
  DiscoveryCounters* const counters_;
  Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The addresses `host` resolves to, as "a.b.c.d:port" / "[v6]:port", sorted and unique.
absl::StatusOr<std::vector<std::string>> ResolveAll(const std::string& host,
                                                    const std::string& port);

}  // namespace gecd::route

#endif  // GECD_ROUTE_DNS_SOURCE_H_
