#ifndef GECD_CONFIG_CONFIG_H_
#define GECD_CONFIG_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// gecd's YAML configuration (configs/gecd.yaml is the default), parsed into typed structs and
// validated: an unknown key, a wrong type or an out-of-range value is an error naming the key
// path and the file line. Every field has a default, so an empty file is a valid config.
namespace gecd::config {

struct ModelSection {
  std::string dir = "models/gecd-gec-small";  // relative paths resolve against the config file
  // The prompt sent to the model; "{text}" is replaced by the user's sentence.
  std::string prompt_template = "{text}";
  int max_input_tokens = 256;
  int max_output_tokens = 128;
  // > 0: the logit bonus of the token that continues copying the user's text
  // (engine/copy_bias.h); 0 decodes plain greedy.
  double copy_bias = 0;
};

struct EngineSection {
  std::string backend = "cpu";  // cpu | cuda | echo
  int threads = 0;              // BLAS threads; 0 = number of cores
  // The cpu backend only: the highest ISA its oneDNN kernels may use (auto: the CPU's best;
  // lower ones for tests). A CPU without the one named is an error.
  std::string cpu_isa = "auto";
  // The cpu backend only: the precision of the matmuls engine.quantization leaves unquantized
  // (all unless int8): auto (bf16 where the CPU has AVX512-BF16 or AMX-BF16 under cpu_isa,
  // else f32) | f32 (OpenBLAS: the numerical oracle) | bf16 (refused without BF16).
  std::string cpu_matmul = "auto";
  int kv_block_size = 16;   // tokens per KV-cache block
  int kv_cache_blocks = 0;  // 0 = sized from kv_cache_mb
  int kv_cache_mb = 256;
  int max_batch_size = 128;    // sequences per step
  int max_step_tokens = 2048;  // prefill + decode tokens per step
  // Speculative decoding: most drafts from the user's text a sequence verifies per step
  // (engine/engine.h); 0 = off. Backends that cannot verify (cuda, for now) ignore it.
  int speculate_tokens = 0;
  // The cuda backend only (the cpu backend runs the checkpoint's weights as stored):
  int device = 0;                         // CUDA device ordinal
  double kv_cache_memory_fraction = 0.5;  // of the device memory free after the weights
  std::string graph_batch_sizes = "1,2,4,8,16,32,64,128,256,512";  // decode graphs; "" = none
  // cuda: fp8 | none (bf16). cpu: int8 (W8A8 through oneDNN, needs VNNI); fp8 and none run
  // the checkpoint's weights in f32 (FP8 layers emulated), the oracle.
  std::string quantization = "fp8";
  bool attention_fp8 = true;                // false: q/k/v/o stay bf16
  std::string fp8_scaling = "per_channel";  // per_channel | per_tensor
  // The echo backend only: each step takes this long (a slowed batching engine, for
  // benchmarks of what sits in front of daemons); 0 = as fast as it goes.
  int echo_step_ms = 0;
};

struct ServerSection {
  std::string listen = "0.0.0.0:50051";  // gRPC; every worker binds it with SO_REUSEPORT
  int workers = 0;  // front-end worker processes; 0 = DefaultWorkers (common/cpu_limit.h)
  // The workers' nice value above the supervisor's and the engine's (0-19; 0: the same). The
  // engine's steps are the pod's throughput and run on every core at once: a worker thread
  // taking a core mid-step stalls the whole step, while a worker's calls can wait a few ms.
  int worker_nice = 5;
  int max_in_flight = 1024;  // admitted requests per worker; beyond: RESOURCE_EXHAUSTED
  // The latency objective: a sentence predicted to take longer (or past its deadline, if sooner)
  // is refused at once with RESOURCE_EXHAUSTED (worker/admission.h).
  int slo_p99_ms = 1000;
  // Refusals a worker answers at once per second at most (beyond: each waits up to 3 ms, or in a
  // storm its turn, so that clients re-sending at once cannot spin the CPU away from the engine;
  // worker/refusal_pacer.h); 0 = no pacing.
  int max_refusals_per_second = 1000;
  // Characters (code points) of one request's whole text, which the worker splits into
  // sentences (model.max_input_tokens holds per sentence); longer texts: INVALID_ARGUMENT.
  int max_input_chars = 20000;
  // The worker's sentence cache (worker/sentence_cache.h), MiB of sentence text and answers per
  // worker; 0 = no cache.
  int sentence_cache_mb = 64;
  int max_streams_per_connection = 1024;  // concurrent calls (HTTP/2 streams) per connection
  int grace_period_ms = 10000;            // SIGTERM: time to finish admitted requests
  int drain_quiet_ms = 500;               // ... and to answer UNAVAILABLE until calls stop coming
  // A connection whose TLS and HTTP/2 handshakes are not done within this is closed (gRPC's
  // default: 120 s), so a flood of connections that never finish holds each for this long.
  int tls_handshake_timeout_ms = 10000;
  // With TLS, each worker accepts at most this many connections within tls_handshake_timeout_ms
  // and closes the next at once: at most this many handshakes in flight per worker
  // (worker/connection_gate.h).
  int max_tls_handshakes = 1000;
  // Prometheus /metrics, /healthz, /readyz: loopback unless told otherwise (they are not
  // authenticated; a Prometheus or kubelet elsewhere needs an address it can reach).
  std::string metrics_listen = "127.0.0.1:9100";
  int ring_slots = 1024;       // per ring, power of two
  int ring_slot_bytes = 4096;  // one ring message; several requests pack into one
  // gRPC server reflection on server.listen (lists and describes the services, for grpcurl);
  // false: the workers do not offer it.
  bool reflection = true;
};

// The spelling stage before the model (spelling/spell_corrector.h): on when both paths are set.
// Relative paths resolve against the config file.
struct SpellingSection {
  std::string dictionary;  // Hunspell dictionary without extension, e.g. /usr/share/hunspell/en_US
  std::string lexicon;     // "word<TAB>count" lines: the words the model was trained on
  int min_count = 3;       // a correction must occur this often in the lexicon
  // Per worker: Hunspell instances, i.e. requests whose words can be looked up at once.
  int instances = 2;
  // Per request, in the server: uncached look-ups at most, and the time they may take (a
  // look-up costs a few ms); the words left are kept as written. eval and generate, which
  // must not depend on load, apply max_lookups but no time budget.
  int max_lookups = 8;
  int budget_ms = 25;
};

// The Kubernetes endpoint source of `gecd route` (route.endpoints.source: kubernetes): the
// EndpointSlices of one Service, by list + watch.
struct KubernetesSection {
  std::string service;        // the Service whose slices are watched (a headless one)
  std::string namespace_;     // "" = the pod's own (in cluster) or the kubeconfig context's
  std::string port = "grpc";  // the slice port, by name; a number matches the port number
  std::string kubeconfig;  // "" = in-cluster (service-account token, ca.crt, KUBERNETES_SERVICE_*)
  int token_refresh_s = 60;  // the token file is re-read this often (bound tokens expire)
};

// `gecd route`: a gRPC proxy for gecd.v1.GrammarCorrection that spreads requests over the
// endpoints a discovery source reports (src/route).
// TLS from gecd route to the endpoints (route.upstream_tls): off while ca_file is "". The
// endpoints' certificates are verified against ca_file and must name server_name (default: the
// host of each endpoint's address, an IP address matched as one); with cert_file and key_file
// the router presents that client certificate (mTLS), so daemons with tls.require_client_cert
// let it in. Checked at start, re-read every refresh_s like the tls section. Relative paths
// resolve against the config file.
struct UpstreamTlsSection {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;
  int refresh_s = 5;
};

struct RouteSection {
  std::string listen = "0.0.0.0:50061";
  // /metrics, /healthz, /readyz: loopback unless told otherwise, as server.metrics_listen.
  std::string metrics_listen = "127.0.0.1:9101";
  std::string policy = "p2c";     // p2c | round_robin | least_request
  int max_in_flight = 10000;      // the router's own cap; beyond: RESOURCE_EXHAUSTED
  int channels_per_endpoint = 1;  // HTTP/2 connections to each endpoint, per relay thread
  int threads = 0;                // relay event-loop threads; 0 = one per core
  // A newly eligible endpoint's weight ramps from min_weight to 1 over slow_start_s (0 = off):
  // weight = max(min_weight, (t / slow_start_s)^(1 / aggression)).
  int slow_start_s = 10;
  double slow_start_min_weight = 0.1;
  double slow_start_aggression = 1.0;
  // This many consecutive connect failures or UNAVAILABLE answers eject an endpoint for
  // ejection_base_ms, doubling with each ejection in a row up to ejection_max_ms; it returns
  // after a passing grpc.health.v1 check.
  int ejection_failures = 5;
  int ejection_base_ms = 1000;
  int ejection_max_ms = 30000;
  int grace_period_ms = 10000;    // SIGTERM: time for the calls in flight to finish
  int drain_quiet_ms = 500;       // ... and to answer UNAVAILABLE until calls stop coming
  std::string source = "static";  // route.endpoints.source: static | dns | kubernetes
  std::vector<std::string> static_endpoints = {"127.0.0.1:50051"};  // route.endpoints.static
  std::string dns;        // route.endpoints.dns: "name:port", every A/AAAA record is an endpoint
  int dns_refresh_s = 5;  // route.dns_refresh_s
  KubernetesSection kubernetes;  // route.kubernetes
  bool reflection = true;        // gRPC server reflection on route.listen
  // TLS on route.listen is the tls section (below). A client's TLS handshake that has not
  // finished within this is cut off, and past max_tls_handshakes handshakes in flight a new
  // connection is closed at once (a flood of slow handshakes costs bounded memory and CPU).
  int tls_handshake_timeout_ms = 10000;
  int max_tls_handshakes = 1000;
  UpstreamTlsSection upstream_tls;  // route.upstream_tls: TLS (mTLS) to the endpoints
};

// TLS on a listener: the tls section is the gRPC listener's (gecd serve's server.listen with
// gRPC's TLS, gecd route's route.listen with OpenSSL under the relay), the metrics_tls section
// the metrics listener's (server.metrics_listen or route.metrics_listen, libmicrohttpd's
// GnuTLS). Off while cert_file is "". The files are checked at start (a bad one stops the
// start, naming it) and re-read every refresh_s: a valid new pair serves the next
// connections, a bad one is logged and the pair in use kept. Relative paths resolve against
// the config file.
struct TlsSection {
  std::string cert_file;             // PEM certificate chain, the server's own first
  std::string key_file;              // PEM private key of cert_file's first certificate
  std::string client_ca_file;        // PEM CAs that client certificates are verified against
  bool require_client_cert = false;  // mTLS: refuse a client without one from client_ca_file
  int refresh_s = 5;
};

// Bearer tokens (auth.tokens_file): off while "". Each line "name sha256-hex" (lowercase hex of
// the token's SHA-256, never the token); '#' starts a comment. Re-read every refresh_s.
struct AuthSection {
  std::string tokens_file;
  int refresh_s = 5;
};

struct LoggingSection {
  std::string level = "info";   // trace | debug | info | warn | error
  std::string format = "text";  // text | json
};

struct Config {
  std::string path;  // the file it was read from ("" for defaults)
  ModelSection model;
  EngineSection engine;
  ServerSection server;
  SpellingSection spelling;
  RouteSection route;
  TlsSection tls;
  TlsSection metrics_tls;
  AuthSection auth;
  LoggingSection logging;
};

absl::StatusOr<Config> ParseConfig(std::string_view yaml, std::string_view path);
// Reads a file; a relative path in a key of PathKeys() is resolved against the file's directory.
absl::StatusOr<Config> LoadConfigFile(const std::string& path);

// The keys that name files: model.dir, spelling.dictionary, spelling.lexicon,
// route.kubernetes.kubeconfig, tls.cert_file, tls.key_file, tls.client_ca_file, the same three
// of metrics_tls, auth.tokens_file.
const std::vector<std::string>& PathKeys();

// Sets one key from the command line ("engine.threads", "4") with the file's type and range
// rules. Rules between keys are checked by ValidateConfig once every override is applied, so
// that one key may be changed together with another it depends on.
absl::Status ApplyOverride(Config& config, std::string_view key_path, std::string_view value);

// The rules between keys (e.g. engine.max_step_tokens >= engine.max_batch_size), which
// ParseConfig also applies.
absl::Status ValidateConfig(const Config& config);

// The file at `path` ("" for the built-in defaults) with `overrides` ("KEY=VALUE" each, as
// --set gives them) applied in order, then ValidateConfig. InvalidArgument names an override
// without '=' or an unknown key.
absl::StatusOr<Config> LoadConfigWithOverrides(const std::string& path,
                                               const std::vector<std::string>& overrides);

// engine.graph_batch_sizes as numbers (validated when the config was read).
std::vector<int> GraphBatchSizes(const EngineSection& engine);

}  // namespace gecd::config

#endif  // GECD_CONFIG_CONFIG_H_
