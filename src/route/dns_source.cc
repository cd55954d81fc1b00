#include "route/dns_source.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "route/static_source.h"
#include "spdlog/spdlog.h"

namespace gecd::route {

absl::StatusOr<std::vector<std::string>> ResolveAll(const std::string& host,
                                                    const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &list); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("resolving ", host, " (route.endpoints.dns): ", gai_strerror(rc)));
  }
  std::vector<std::string> out;
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, text, sizeof(text));
      out.push_back(absl::StrCat(text, ":", port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, text,
                sizeof(text));
      out.push_back(absl::StrCat("[", text, "]:", port));
    }
  }
  freeaddrinfo(list);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

DnsSource::DnsSource(std::string host, int port, std::chrono::milliseconds refresh,
                     DiscoveryCounters* counters)
    : host_(std::move(host)), port_(std::to_string(port)), refresh_(refresh), counters_(counters) {}

DnsSource::~DnsSource() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;  // ends the loop's AwaitWithTimeout
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status DnsSource::Start(UpdateCallback on_update) {
  thread_ = std::thread([this, cb = std::move(on_update)]() mutable { Loop(std::move(cb)); });
  return absl::OkStatus();
}

void DnsSource::Loop(UpdateCallback on_update) {
  std::vector<std::string> last;
  bool reported = false;
  mu_.Lock();
  while (!stopping_) {
    mu_.Unlock();  // getaddrinfo blocks; the destructor waits at most one resolution
    absl::StatusOr<std::vector<std::string>> addresses = ResolveAll(host_, port_);
    mu_.Lock();
    if (stopping_) break;
    if (!addresses.ok()) {
      counters_->errors.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("{}; keeping the {} endpoints known", addresses.status().ToString(),
                   last.size());
    } else if (!reported || *addresses != last) {
      spdlog::info("{} resolves to {}", host_, absl::StrJoin(*addresses, ", "));
      last = *addresses;
      reported = true;
      counters_->updates.fetch_add(1, std::memory_order_relaxed);
      on_update(ReadyEndpoints(last));
    }
    mu_.AwaitWithTimeout(&stopping_, refresh_);
  }
  mu_.Unlock();
}

}  // namespace gecd::route
