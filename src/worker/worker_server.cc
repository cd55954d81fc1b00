#include "worker/worker_server.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/monotonic_clock.h"
#include "common/status_macros.h"
#include "daemon/grpc_reflection.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace gecd::worker {

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const config::Config& config,
                                                                  const model::Tokenizer& tokenizer,
                                                                  EngineLink& engine,
                                                                  metrics::ProcessMetrics& metrics,
                                                                  const Options& options) {
  // A process-wide switch read by the builder.
  grpc::EnableDefaultHealthCheckService(true);

  ASSIGN_OR_RETURN(text::PromptBuilder prompts,
                   text::PromptBuilder::Create(config, tokenizer, options.service.spelling));
  ASSIGN_OR_RETURN(sentences::SentenceSplitter splitter, sentences::SentenceSplitter::Create());
  std::unique_ptr<auth::TokenTable> tokens;
  GrammarService::Options service_options = options.service;
  if (!config.auth.tokens_file.empty()) {
    ASSIGN_OR_RETURN(tokens, auth::TokenTable::Create(config.auth));
    service_options.tokens = tokens.get();
  }
  std::unique_ptr<WorkerServer> server(new WorkerServer(
      std::move(tokens),
      std::make_unique<GrammarService>(config, tokenizer, std::move(prompts), std::move(splitter),
                                       engine, metrics, service_options),
      std::chrono::milliseconds(config.server.drain_quiet_ms)));
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!config.tls.cert_file.empty()) {
    ASSIGN_OR_RETURN(server->tls_, tls::ServerTls::Create(config.tls));
    credentials = server->tls_->credentials();
  }
  grpc::ServerBuilder builder;
  daemon::SetReflection(builder, config.server.reflection);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 1);
  // Each open call holds ~18 KB (gRPC's call arena and HTTP/2 stream, the reactor) for as long as
  // the client keeps it open, so a client that abandons streams without closing them would
  // otherwise grow the worker without bound; past the limit its new calls wait in its transport.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             config.server.max_streams_per_connection);
  // A connection that has not finished its TLS and HTTP/2 handshakes by then is closed (gRPC's
  // default is 120 s), so a flood of slow handshakes holds each socket that long at most.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             config.server.tls_handshake_timeout_ms);
  if (server->tls_ != nullptr) {
    // With TLS the worker accepts connections itself, to cap the handshakes in flight, which
    // gRPC 1.51 cannot (worker/connection_gate.h); plaintext keeps gRPC's own listener.
    ASSIGN_OR_RETURN(
        server->gate_,
        ConnectionGate::Listen(
            {.listen = options.listen,
             .max_handshakes = config.server.max_tls_handshakes,
             .handshake_timeout = std::chrono::milliseconds(config.server.tls_handshake_timeout_ms),
             .on_refused = [&metrics] { metrics.TlsConnectionRefused(); }}));
    server->acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, credentials);
    server->port_ = server->gate_->port();
  } else {
    builder.AddListeningPort(options.listen, credentials, &server->port_);
  }
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (server.listen)"));
  }
  if (server->gate_ != nullptr) {
    server->gate_->Start([acceptor = server->acceptor_.get()](int listener_fd, int fd) {
      grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
      connection.listener_fd = listener_fd;
      connection.fd = fd;
      acceptor->HandleNewConnection(&connection);
    });
  }
  server->health_ = std::make_unique<daemon::HealthPoller>(
      server->server_->GetHealthCheckService(),
      daemon::HealthPoller::Subject{.ready = [&engine] { return engine.Ready(); },
                                    .ready_text = "engine ready",
                                    .not_ready_text = "engine not ready",
                                    .services = {v1::GrammarCorrection::service_full_name()}},
      options.health_poll);
  return server;
}

WorkerServer::WorkerServer(std::unique_ptr<auth::TokenTable> tokens,
                           std::unique_ptr<GrammarService> service,
                           std::chrono::milliseconds drain_quiet)
    : tokens_(std::move(tokens)), service_(std::move(service)), drain_quiet_(drain_quiet) {}

WorkerServer::~WorkerServer() { Drain(std::chrono::milliseconds(0)); }

void WorkerServer::Drain(std::chrono::milliseconds grace) {
  if (stopping_.exchange(true)) return;
  if (health_ != nullptr) health_->Stop();
  if (server_ == nullptr) return;  // Start failed
  // NOT_SERVING for every service, and it stays so whatever the engine does.
  server_->GetHealthCheckService()->Shutdown();
  service_->StartDraining();
  spdlog::info("draining: {} requests in flight, grace {} ms", service_->in_flight(),
               grace.count());
  const auto deadline = std::chrono::system_clock::now() + grace;
  // New sentences get UNAVAILABLE "shutting down", which clients retry elsewhere, for as long
  // as admitted ones run and open streams finish, and until no call has arrived for
  // server.drain_quiet_ms: a call that reaches a gRPC server already in Shutdown, even one on
  // the wire when Shutdown starts, is cancelled instead, and clients do not retry CANCELLED.
  const auto quiet_us = std::chrono::duration_cast<std::chrono::microseconds>(drain_quiet_);
  const auto busy = [&] {
    return service_->in_flight() > 0 || service_->open_streams() > 0 ||
           MonotonicMicros() - service_->last_call_us() < quiet_us.count();
  };
  while (busy() && std::chrono::system_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (busy()) {
    spdlog::warn("grace period over: {} requests in flight, {} streams open; cancelling them",
                 service_->in_flight(), service_->open_streams());
  }
  // The port closes here with gRPC's own listener; the gate's, the same.
  if (gate_ != nullptr) gate_->Stop();
  server_->Shutdown(deadline);
  server_->Wait();
}

}  // namespace gecd::worker
