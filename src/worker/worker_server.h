#ifndef GECD_WORKER_WORKER_SERVER_H_
#define GECD_WORKER_WORKER_SERVER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "auth/token_table.h"
#include "config/config.h"
#include "daemon/health_poller.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "metrics/metrics.h"
#include "tls/server_tls.h"
#include "tokenizer/tokenizer.h"
#include "worker/connection_gate.h"
#include "worker/engine_link.h"
#include "worker/grammar_service.h"

// One front-end worker's gRPC server: GrammarService plus grpc.health.v1 (SERVING only while
// the engine link is ready and the worker is not draining, for "" and for
// gecd.v1.GrammarCorrection) and server reflection. It listens with SO_REUSEPORT, so every
// worker of an instance binds the same address; with TLS when the config's tls section names a
// certificate (tls/server_tls.h: rotated without a restart; connections accepted through a
// ConnectionGate, which caps the handshakes in flight), and checks bearer tokens when
// auth.tokens_file is set (auth/token_table.h). RunWorkerProcess builds one over the
// shared-memory engine link; tests build one over a fake.
namespace gecd::worker {

class WorkerServer {
 public:
  struct Options {
    std::string listen;  // host:port; port 0 picks a free one (see port())
    GrammarService::Options service;
    // How often the health status follows EngineLink::Ready().
    std::chrono::milliseconds health_poll{100};
  };

  // Everything passed must outlive the server.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const config::Config& config,
                                                             const model::Tokenizer& tokenizer,
                                                             EngineLink& engine,
                                                             metrics::ProcessMetrics& metrics,
                                                             const Options& options);
  // Drains with no grace if Drain was not called.
  ~WorkerServer();
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  int port() const { return port_; }
  GrammarService& service() { return *service_; }

  // Health goes NOT_SERVING, new RPCs and new stream sentences are refused (UNAVAILABLE),
  // admitted sentences are answered, open streams finish with UNAVAILABLE; the port closes once
  // nothing runs and no call came for server.drain_quiet_ms. Whatever is still running after
  // `grace` is cancelled. Returns once the server has stopped. Idempotent.
  void Drain(std::chrono::milliseconds grace);

 private:
  WorkerServer(std::unique_ptr<auth::TokenTable> tokens, std::unique_ptr<GrammarService> service,
               std::chrono::milliseconds drain_quiet);

  std::unique_ptr<auth::TokenTable> tokens_;  // null without auth.tokens_file; outlives service_
  std::unique_ptr<GrammarService> service_;
  std::unique_ptr<tls::ServerTls> tls_;  // null without TLS; outlives the server using it
  std::unique_ptr<grpc::Server> server_;
  // With TLS: gRPC takes the connections the gate accepts through acceptor_. Declared after
  // server_ so that the gate's thread stops first.
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::unique_ptr<ConnectionGate> gate_;
  std::unique_ptr<daemon::HealthPoller> health_;
  int port_ = 0;
  const std::chrono::milliseconds drain_quiet_;
  std::atomic<bool> stopping_{false};
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_WORKER_SERVER_H_
