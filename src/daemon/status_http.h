#ifndef GECD_DAEMON_STATUS_HTTP_H_
#define GECD_DAEMON_STATUS_HTTP_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

struct MHD_Daemon;

// The operator endpoint of both daemons (gecd serve's server.metrics_listen, gecd route's
// route.metrics_listen): GET /metrics (Prometheus text), /healthz (200 while the process runs)
// and /readyz (200 only while `ready` says so, else 503). libmicrohttpd on an epoll thread: an
// idle or slow client costs a file descriptor and a small buffer, never a thread, so probes keep
// answering with thousands of such connections open.
//
// Plain HTTP, or HTTPS when started with a certificate (the metrics_tls section; the files are
// followed by tls::MetricsServer): libmicrohttpd's GnuTLS with gecd's policy, TLS 1.2 or later
// and in TLS 1.2 only ECDHE key exchange with AEAD ciphers (AES-GCM, ChaCha20-Poly1305). With
// client CAs, a client certificate is asked for in the handshake; libmicrohttpd does not verify
// it, so every request is checked here (GnuTLS against those CAs, for client use): a request
// whose certificate does not verify, or that has none while one is required, gets 403 and the
// connection is closed.
//
// Rotation (UseCertificate) without a restart: libmicrohttpd reads its certificate and CAs
// once, when a daemon starts, so a new pair gets a new libmicrohttpd daemon. To make that
// possible the listening socket is this class's, not libmicrohttpd's: an accept thread of its
// own hands each connection to the newest daemon (MHD_add_connection), so the switch is one
// pointer and no connection attempt in between is refused. The previous daemon retires: it
// keeps its open connections (each finishes the request it is on; the answer carries
// `Connection: close`) and is stopped once the last closed, or after kRetireTimeout (an idle
// keep-alive connection is closed by kConnectionTimeout before that). Other designs in
// libmicrohttpd's API fell short: a certificate callback (MHD_OPTION_HTTPS_CERT_CALLBACK)
// swaps the pair but not the client CAs, and MHD_quiesce_daemon plus a new daemon on the same
// socket leaves the socket's owner unknowable when that start fails (libmicrohttpd 0.9.75
// closes a socket it was given on some failure paths and not on others).
//
// Owns the listening socket, the accept thread, the libmicrohttpd daemons (each with its
// thread) and the certificates they serve. The destructor closes every connection and joins.
// Thread-safe: UseCertificate may be called from any thread (one at a time, as the watcher
// does); the handlers run on libmicrohttpd's threads.
namespace gecd::daemon {

class StatusHttpServer {
 public:
  struct Handlers {
    std::function<std::string()> metrics;  // the /metrics body
    std::function<bool()> ready;
  };

  // What HTTPS serves, PEM as read from the files (tls::KeyMaterial).
  struct Certificate {
    std::string certificate_chain;  // the server's own certificate first
    std::string private_key;
    std::string client_ca;  // the CAs client certificates are verified against; "" = none asked
  };
  struct Https {
    Certificate certificate;
    bool require_client_cert = false;  // refuse requests without a verified client certificate
  };

  // A connection that sends nothing for this long (between requests, or within one) is closed.
  static constexpr std::chrono::seconds kConnectionTimeout{5};
  // A retired daemon's connections still open this long after a rotation are closed.
  static constexpr std::chrono::seconds kRetireTimeout = 2 * kConnectionTimeout;
  // Connections open at once; the next is accepted and closed at once.
  static constexpr unsigned kMaxConnections = 4096;
  // Connections the kernel queues before accept() (capped by net.core.somaxconn).
  static constexpr int kListenBacklog = 4096;
  // Each connection's buffer for its request line and headers; larger requests get 431.
  static constexpr size_t kConnectionMemory = 16 * 1024;

  // Binds `listen` ("host:port", "[v6]:port"; port 0 picks one) before returning, so a taken
  // port is an error here (naming `listen_key`, the config key it came from), then serves:
  // plain HTTP, or HTTPS with `https`. A certificate that GnuTLS refuses is an error naming
  // the reason.
  static absl::StatusOr<std::unique_ptr<StatusHttpServer>> Start(
      const std::string& listen, Handlers handlers, std::optional<Https> https = std::nullopt,
      std::string_view listen_key = "server.metrics_listen");
  ~StatusHttpServer();
  StatusHttpServer(const StatusHttpServer&) = delete;
  StatusHttpServer& operator=(const StatusHttpServer&) = delete;

  int port() const { return port_; }
  bool https() const { return https_; }

  // New connections get `certificate` (and its client CAs); open ones finish on theirs. An
  // error (a pair GnuTLS refuses, a plain HTTP server) changes nothing.
  absl::Status UseCertificate(const Certificate& certificate) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One libmicrohttpd daemon and what it serves (defined in status_http.cc).
  struct Daemon;

  StatusHttpServer(Handlers handlers, std::optional<Https> https);
  absl::StatusOr<std::unique_ptr<Daemon>> StartDaemon(std::optional<Certificate> certificate);
  // The accept thread: accepts, hands over to the newest daemon, stops drained retired ones.
  void AcceptLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void AcceptPending() ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the retired daemons that are done out of daemons_; the milliseconds until the next
  // one's deadline (-1: none retired).
  int TakeDoneDaemons(std::vector<std::unique_ptr<Daemon>>& done) ABSL_LOCKS_EXCLUDED(mu_);
  void Wake() const;

  const Handlers handlers_;  // read by libmicrohttpd's threads through the request callback
  const bool https_;
  const bool require_client_cert_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: wakes the accept thread (a rotation, a drained daemon, stop)
  int port_ = 0;
  Mutex mu_;
  struct Generation {
    std::unique_ptr<Daemon> daemon;
    // A retired one's deadline: its connections still open then are cut off.
    std::chrono::steady_clock::time_point retire_by;
  };
  // The serving daemon last, retired ones before it.
  std::vector<Generation> daemons_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread acceptor_;
};

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_STATUS_HTTP_H_
