#include "route/router.h"

#include <signal.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/grpc_reflection.h"
#include "daemon/sd_notify.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace gecd::route {
namespace {

constexpr std::chrono::milliseconds kHealthPoll{100};

EndpointSet::Options SetOptions(const config::RouteSection& r, const tls::UpstreamTls* tls) {
  EndpointSet::Options o;
  o.tls = tls;
  o.policy = ParsePolicy(r.policy).value_or(Policy::kP2c);  // validated by the config
  o.slow_start = {.window_s = static_cast<double>(r.slow_start_s),
                  .min_weight = r.slow_start_min_weight,
                  .aggression = r.slow_start_aggression};
  o.ejection = {.failures = r.ejection_failures,
                .base = std::chrono::milliseconds(r.ejection_base_ms),
                .max = std::chrono::milliseconds(r.ejection_max_ms)};
  return o;
}

}  // namespace

Router::Router(const config::Config& config, std::unique_ptr<tls::UpstreamTls> upstream_tls)
    : drain_quiet_(config.route.drain_quiet_ms),
      upstream_tls_(std::move(upstream_tls)),
      endpoints_(SetOptions(config.route, upstream_tls_.get())) {}

absl::StatusOr<std::unique_ptr<Router>> Router::Start(const config::Config& config) {
  std::unique_ptr<tls::UpstreamTls> upstream_tls;
  if (!config.route.upstream_tls.ca_file.empty()) {
    ASSIGN_OR_RETURN(upstream_tls, tls::UpstreamTls::Create(config.route.upstream_tls));
  }
  std::unique_ptr<Router> router(new Router(config, std::move(upstream_tls)));
  if (!config.tls.cert_file.empty()) {
    ASSIGN_OR_RETURN(router->listener_tls_, tls::ListenerTls::Create(config.tls));
  }
  if (!config.auth.tokens_file.empty()) {
    ASSIGN_OR_RETURN(router->tokens_, auth::TokenTable::Create(config.auth));
  }
  ASSIGN_OR_RETURN(router->source_, CreateEndpointSource(config.route, &router->discovery_));
  Router* r = router.get();
  RETURN_IF_ERROR(r->source_->Start([r](std::vector<DiscoveredEndpoint> endpoints) {
    r->discovery_.updates.fetch_add(1, std::memory_order_relaxed);
    r->endpoints_.Update(std::move(endpoints));
  }));

  // A process-wide switch read by the builder.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // Without reflection, the relay's calls for it reach a server that answers UNIMPLEMENTED.
  daemon::SetReflection(builder, config.route.reflection);
  int internal_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &internal_port);
  builder.RegisterService(&r->listed_);
  r->server_ = builder.BuildAndStart();
  if (r->server_ == nullptr || internal_port == 0) {
    return absl::UnavailableError("cannot start the router's own gRPC server on 127.0.0.1");
  }
  ASSIGN_OR_RETURN(
      r->relay_,
      Relay::Start(
          {.listen = config.route.listen,
           .internal = absl::StrCat("127.0.0.1:", internal_port),
           .threads = config.route.threads > 0
                          ? config.route.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
           .connections_per_endpoint = config.route.channels_per_endpoint,
           .max_in_flight = config.route.max_in_flight,
           .tokens = r->tokens_.get(),
           .tls = r->listener_tls_.get(),
           .handshake_timeout = std::chrono::milliseconds(config.route.tls_handshake_timeout_ms),
           .max_handshakes = config.route.max_tls_handshakes,
           .upstream_tls = r->upstream_tls_.get()},
          r->endpoints_, r->metrics_));
  r->health_ = std::make_unique<daemon::HealthPoller>(
      r->server_->GetHealthCheckService(),
      daemon::HealthPoller::Subject{.ready = [r] { return r->Ready(); },
                                    .ready_text = "an endpoint is eligible",
                                    .not_ready_text = "no eligible endpoint",
                                    .services = {v1::GrammarCorrection::service_full_name()}},
      kHealthPoll);

  daemon::StatusHttpServer::Handlers handlers{
      .metrics =
          [r] { return r->metrics_.Format(r->endpoints_, r->discovery_, r->relay_->in_flight()); },
      .ready = [r] { return r->Ready(); }};
  ASSIGN_OR_RETURN(r->status_,
                   tls::MetricsServer::Start("route.metrics_listen", config.route.metrics_listen,
                                             std::move(handlers), config.metrics_tls));
  return router;
}

Router::~Router() { Drain(std::chrono::milliseconds(0)); }

void Router::Drain(std::chrono::milliseconds grace) {
  if (draining_.exchange(true)) return;
  if (health_ != nullptr) health_->Stop();
  if (server_ != nullptr) server_->GetHealthCheckService()->Shutdown();  // NOT_SERVING
  if (relay_ != nullptr) {
    relay_->StartDraining();
    spdlog::info("draining: {} calls in flight, grace {} ms", relay_->in_flight(), grace.count());
    // Clients that saw NOT_SERVING (or their balancer that saw /readyz) go elsewhere; until they
    // have, their calls get UNAVAILABLE, which they retry, rather than a closed connection.
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (auto now = std::chrono::steady_clock::now(); now < deadline;
         now = std::chrono::steady_clock::now()) {
      if (relay_->in_flight() == 0 && now - relay_->last_arrival() >= drain_quiet_) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (relay_->in_flight() > 0) {
      spdlog::warn("drain: {} calls still in flight after the grace period are cut off",
                   relay_->in_flight());
    }
    relay_->Stop();
  }
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  source_.reset();  // no more updates into the set
}

int RunRouter(const config::Config& config) {
  // Blocked before any thread starts, so every thread inherits the mask and sigwait alone
  // takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<Router>> router = Router::Start(config);
  if (!router.ok()) {
    spdlog::critical("{}", router.status().ToString());
    return 2;
  }
  spdlog::info("routing on {} (port {}{}), policy {}, endpoints from {}{}; metrics on port {} ({})",
               config.route.listen, (*router)->port(),
               config.tls.cert_file.empty() ? ", plaintext" : ", TLS", config.route.policy,
               config.route.source,
               config.route.upstream_tls.ca_file.empty() ? " (plaintext)" : " (over TLS)",
               (*router)->metrics_port(),
               config.metrics_tls.cert_file.empty() ? "plain HTTP" : "HTTPS");
  (void)daemon::NotifySystemd("READY=1");
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("{}: draining", strsignal(signal_number));
  (void)daemon::NotifySystemd("STOPPING=1");
  (*router)->Drain(std::chrono::milliseconds(config.route.grace_period_ms));
  router->reset();
  spdlog::info("stopped");
  return 0;
}

}  // namespace gecd::route
