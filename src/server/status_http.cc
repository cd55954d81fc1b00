#include "server/status_http.h"

#include <httplib.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/listen_address.h"

namespace gecd::server {
namespace {

constexpr char kPrometheusType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace

absl::StatusOr<std::unique_ptr<StatusHttpServer>> StatusHttpServer::Start(
    const std::string& listen, Handlers handlers) {
  ASSIGN_OR_RETURN(const ListenAddress address,
                   ParseListenAddress(listen, "server.metrics_listen"));
  const std::string& host = address.host;
  const int port = address.port;

  std::unique_ptr<StatusHttpServer> s(new StatusHttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  s->server_->Get("/metrics", [metrics = std::move(handlers.metrics)](
                                  const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics(), kPrometheusType);
  });
  s->server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s->server_->Get("/readyz", [ready = std::move(handlers.ready)](const httplib::Request&,
                                                                 httplib::Response& res) {
    const bool ok = ready();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ready\n" : "not ready\n", "text/plain");
  });
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(host);
  } else if (s->server_->bind_to_port(host, port)) {
    s->port_ = port;
  } else {
    s->port_ = -1;
  }
  if (s->port_ < 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, " (metrics)"));
  }
  s->thread_ = std::thread([s = s.get()] {
    s->server_->listen_after_bind();
    s->listen_returned_.store(true);
  });
  return s;
}

StatusHttpServer::~StatusHttpServer() {
  if (thread_.joinable()) {
    // httplib's stop() is a no-op until listen has started; wait for one or the other.
    while (!server_->is_running() && !listen_returned_.load()) std::this_thread::yield();
    server_->stop();
    thread_.join();
  }
}

}  // namespace gecd::server
