#include "route/endpoint_set.h"

#include <algorithm>
#include <future>
#include <utility>

#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "spdlog/spdlog.h"

namespace gecd::route {
namespace {

constexpr std::chrono::milliseconds kHealthCheckPeriod{100};

Endpoint::Clock::rep Ticks(Endpoint::Clock::time_point t) { return t.time_since_epoch().count(); }

// grpc.health.v1.HealthCheckResponse's status field (1, a varint) is SERVING (1). The request
// for the server's overall health (service "") is the empty message, so both ends are small
// enough to read and write by hand, without the health proto's generated code (which gRPC's
// Debian package does not install).
bool IsServing(const grpc::ByteBuffer& response) {
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // Fields other than status are never sent by gRPC's health service; a serving answer is
  // exactly tag 0x08 (field 1, varint) followed by 1.
  return bytes == std::string("\x08\x01", 2);
}

// A dropped endpoint still running calls is draining too.
Endpoint::State StateOf(const Endpoint& e, bool retired) {
  if (retired || e.draining.load()) return Endpoint::State::kDraining;
  return e.ejected() ? Endpoint::State::kEjected : Endpoint::State::kEligible;
}

}  // namespace

EndpointSet::EndpointSet(Options options)
    : options_(std::move(options)),
      picker_(options_.policy),
      candidates_(std::make_shared<Candidates>()) {
  health_thread_ = std::thread([this] { HealthCheckLoop(); });
}

EndpointSet::~EndpointSet() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.SignalAll();
  health_thread_.join();
}

void EndpointSet::Update(std::vector<DiscoveredEndpoint> reported) {
  MutexLock lock(&mu_);
  const auto now = Clock::now();
  std::map<std::string, std::shared_ptr<Endpoint>> next;
  for (DiscoveredEndpoint& d : reported) {
    if (next.contains(d.address)) continue;
    std::shared_ptr<Endpoint> e;
    if (auto it = endpoints_.find(d.address); it != endpoints_.end()) {
      e = it->second;
    } else {
      // A retired endpoint that comes back keeps its connections but starts over.
      auto r = std::find_if(retired_.begin(), retired_.end(),
                            [&](const auto& x) { return x->address() == d.address; });
      if (r != retired_.end()) {
        e = *r;
        retired_.erase(r);
        e->removed.store(false);
      } else {
        e = std::make_shared<Endpoint>(d.address, options_.ejection, options_.tls);
      }
      // The endpoints of the first report are the fleet as it stands, not pods just started.
      e->eligible_since.store(first_update_ ? Ticks(now - std::chrono::hours(1)) : Ticks(now));
      spdlog::info(
          "endpoint {} added ({}{})", d.address, d.draining ? "draining" : "eligible",
          !first_update_ && !d.draining && options_.slow_start.window_s > 0 ? ", slow start" : "");
      e->draining.store(d.draining);
    }
    if (e->draining.load() != d.draining) {
      if (d.draining) {
        spdlog::info("endpoint {} draining: no new calls, {} in flight finish", d.address,
                     e->in_flight());
      } else {
        spdlog::info("endpoint {} eligible again", d.address);
      }
      e->draining.store(d.draining);
    }
    next.emplace(d.address, std::move(e));
  }
  for (auto& [address, e] : endpoints_) {
    if (next.contains(address)) continue;
    spdlog::info("endpoint {} removed ({} calls in flight finish on it)", address, e->in_flight());
    e->removed.store(true);
    retired_.push_back(e);
  }
  endpoints_ = std::move(next);
  first_update_ = false;
  ForgetIdleRetiredLocked();
  RebuildLocked();
}

void EndpointSet::RebuildLocked() {
  auto c = std::make_shared<Candidates>();
  for (const auto& [address, e] : endpoints_) {
    if (!e->draining.load() && !e->ejected()) c->endpoints.push_back(e);
  }
  eligible_.store(static_cast<int>(c->endpoints.size()));
  MutexLock lock(&candidates_mu_);
  candidates_ = std::move(c);
}

void EndpointSet::ForgetIdleRetiredLocked() {
  std::erase_if(retired_, [](const auto& e) { return e->in_flight() == 0; });
}

std::shared_ptr<Endpoint> EndpointSet::Pick(const Endpoint* exclude) {
  std::shared_ptr<const Candidates> c;
  {
    MutexLock lock(&candidates_mu_);
    c = candidates_;
  }
  const auto& list = c->endpoints;
  int skip = -1;
  if (exclude != nullptr) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].get() == exclude) skip = static_cast<int>(i);
    }
  }
  const Clock::rep now = Ticks(Clock::now());
  const int i = picker_.Pick(
      static_cast<int>(list.size()),
      [&](int k) {
        const Endpoint& e = *list[k];
        const double age =
            std::chrono::duration<double>(
                Clock::duration(now - e.eligible_since.load(std::memory_order_relaxed)))
                .count();
        return Candidate{.in_flight = e.in_flight(), .weight = options_.slow_start.Weight(age)};
      },
      skip);
  return i < 0 ? nullptr : list[i];
}

void EndpointSet::CallEnded(Endpoint& endpoint, grpc::StatusCode code) {
  if (!endpoint.CallEnded(code, Clock::now())) return;
  MutexLock lock(&mu_);
  ++ejections_;
  spdlog::warn("endpoint {} ejected for {} ms after {} consecutive failures", endpoint.address(),
               endpoint.back_off().count(), options_.ejection.failures);
  RebuildLocked();
  wake_.SignalAll();
}

bool EndpointSet::AnyEligible() const { return eligible_.load() > 0; }

EndpointSet::Counts EndpointSet::counts() const {
  MutexLock lock(&mu_);
  Counts c;
  auto count = [&](Endpoint::State state) {
    switch (state) {
      case Endpoint::State::kEligible:
        ++c.eligible;
        break;
      case Endpoint::State::kDraining:
        ++c.draining;
        break;
      case Endpoint::State::kEjected:
        ++c.ejected;
        break;
    }
  };
  for (const auto& [address, e] : endpoints_) count(StateOf(*e, /*retired=*/false));
  for (const auto& e : retired_) {
    if (e->in_flight() > 0) count(StateOf(*e, /*retired=*/true));
  }
  c.ejections = ejections_;
  return c;
}

std::vector<EndpointSet::EndpointStats> EndpointSet::Stats() const {
  MutexLock lock(&mu_);
  std::vector<EndpointStats> out;
  auto add = [&](const Endpoint& e, bool retired) {
    out.push_back({e.address(), StateOf(e, retired), e.in_flight(), e.requests()});
  };
  for (const auto& [address, e] : endpoints_) add(*e, false);
  for (const auto& e : retired_) add(*e, true);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.address < b.address; });
  return out;
}

bool EndpointSet::HealthCheck(Endpoint& endpoint) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + options_.health_check_timeout);
  grpc::Slice empty("", 0);
  grpc::ByteBuffer request(&empty, 1), response;  // an empty message, not a missing one
  std::promise<grpc::Status> done;
  grpc::GenericStub stub(endpoint.channel());
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status status = done.get_future().get();
  return status.ok() && IsServing(response);
}

void EndpointSet::HealthCheckLoop() {
  mu_.Lock();
  while (!stopping_) {
    wake_.WaitWithTimeout(&mu_, kHealthCheckPeriod);
    if (stopping_) break;
    ForgetIdleRetiredLocked();
    std::vector<std::shared_ptr<Endpoint>> due;
    const auto now = Clock::now();
    for (const auto& [address, e] : endpoints_) {
      if (e->DueForCheck(now)) due.push_back(e);
    }
    if (due.empty()) continue;
    mu_.Unlock();  // checks take up to health_check_timeout each; updates must not wait
    std::vector<std::pair<std::shared_ptr<Endpoint>, bool>> verdicts;
    for (auto& e : due) verdicts.emplace_back(e, HealthCheck(*e));
    mu_.Lock();
    for (auto& [e, passed] : verdicts) {
      e->RecordCheck(passed, Clock::now());
      if (passed) {
        e->eligible_since.store(Ticks(Clock::now()));
        spdlog::info("endpoint {} returned after a passing health check", e->address());
      } else {
        ++ejections_;
        spdlog::warn("endpoint {} failed its health check: ejected for {} ms", e->address(),
                     e->back_off().count());
      }
    }
    RebuildLocked();
  }
  mu_.Unlock();
}

}  // namespace gecd::route
