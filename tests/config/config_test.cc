#include "config/config.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/memory_limit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"
#include "yaml-cpp/yaml.h"

namespace gecd::config {
namespace {

using ::testing::HasSubstr;

TEST(Config, EmptyFileGivesDefaults) {
  auto c = ParseConfig("", "x.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.backend, "cpu");
  EXPECT_EQ(c->engine.kv_block_size, 16);
}

TEST(Config, ParsesEveryKind) {
  auto c = ParseConfig(R"(
model:
  dir: /m
  prompt_template: "Fix: {text}\n"
engine:
  backend: echo
  threads: 2
logging:
  format: json
)",
                       "x.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.dir, "/m");
  EXPECT_EQ(c->model.prompt_template, "Fix: {text}\n");
  EXPECT_EQ(c->engine.backend, "echo");
  EXPECT_EQ(c->engine.threads, 2);
  EXPECT_EQ(c->logging.format, "json");
}

TEST(Config, UnknownKeyNamesPathAndLine) {
  auto c = ParseConfig("engine:\n  backend: cpu\n  thread: 4\n", "conf.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("conf.yaml:3"));
  EXPECT_THAT(c.status().message(), HasSubstr("engine.thread"));
  auto top = ParseConfig("enigne:\n  threads: 4\n", "conf.yaml");
  ASSERT_FALSE(top.ok());
  EXPECT_THAT(top.status().message(), HasSubstr("conf.yaml:1: unknown key 'enigne'"));
}

TEST(Config, WrongTypeNamesPathAndLine) {
  auto c = ParseConfig("engine:\n  threads: lots\n", "conf.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("conf.yaml:2"));
  EXPECT_THAT(c.status().message(), HasSubstr("engine.threads: expected an integer"));
  auto section = ParseConfig("engine: 3\n", "conf.yaml");
  ASSERT_FALSE(section.ok());
  EXPECT_THAT(section.status().message(), HasSubstr("engine: expected a mapping"));
  auto list = ParseConfig("model:\n  dir: [a, b]\n", "conf.yaml");
  ASSERT_FALSE(list.ok());
  EXPECT_THAT(list.status().message(), HasSubstr("model.dir: expected a string"));
}

TEST(Config, OutOfRangeAndBadEnumAreErrors) {
  auto c = ParseConfig("engine:\n  kv_block_size: 0\n", "conf.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("engine.kv_block_size: expected an integer in [1"));
  auto e = ParseConfig("engine:\n  backend: tpu\n", "conf.yaml");
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("one of cpu|cuda|echo"));
  auto t = ParseConfig("model:\n  prompt_template: no placeholder\n", "conf.yaml");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("{text}"));
}

TEST(Config, CudaBackendSettings) {
  auto c = ParseConfig(
      "engine:\n  backend: cuda\n  device: 1\n  kv_cache_memory_fraction: 0.8\n"
      "  graph_batch_sizes: \"1,8,64\"\n  quantization: none\n  attention_fp8: false\n"
      "  fp8_scaling: per_tensor\n",
      "conf.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.device, 1);
  EXPECT_DOUBLE_EQ(c->engine.kv_cache_memory_fraction, 0.8);
  EXPECT_EQ(GraphBatchSizes(c->engine), (std::vector<int>{1, 8, 64}));
  EXPECT_EQ(c->engine.quantization, "none");
  EXPECT_FALSE(c->engine.attention_fp8);
  EXPECT_EQ(c->engine.fp8_scaling, "per_tensor");
  Config d;
  EXPECT_EQ(GraphBatchSizes(d.engine).size(), 10u);
  ASSERT_TRUE(ApplyOverride(d, "engine.graph_batch_sizes", "").ok());
  EXPECT_TRUE(GraphBatchSizes(d.engine).empty());

  for (const char* bad : {"kv_cache_memory_fraction: 0", "kv_cache_memory_fraction: 1.5",
                          "graph_batch_sizes: \"1,x\"", "graph_batch_sizes: \"0\"",
                          "attention_fp8: maybe", "quantization: int4"}) {
    auto e = ParseConfig(std::string("engine:\n  ") + bad + "\n", "conf.yaml");
    ASSERT_FALSE(e.ok()) << bad;
    const std::string key = std::string(bad).substr(0, std::string(bad).find(':'));
    EXPECT_THAT(e.status().message(), HasSubstr("engine." + key)) << bad;
  }
}

TEST(Config, CpuMatmulIsAutoF32OrBf16AndATypoNamesTheKey) {
  EXPECT_EQ(Config().engine.cpu_matmul,
            "auto");  // bf16 where the CPU has it (engine/cpu_backend.h)
  for (const char* v : {"auto", "f32", "bf16"}) {
    auto c = ParseConfig(std::string("engine:\n  cpu_matmul: ") + v + "\n", "conf.yaml");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->engine.cpu_matmul, v);
  }
  auto e = ParseConfig("engine:\n  cpu_matmul: fp32\n", "conf.yaml");
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(),
              HasSubstr("engine.cpu_matmul: expected one of auto|f32|bf16, got 'fp32'"));
  Config d;
  EXPECT_FALSE(ApplyOverride(d, "engine.cpu_matmul", "bfloat16").ok());
  ASSERT_TRUE(ApplyOverride(d, "engine.cpu_matmul", "f32").ok());
  EXPECT_EQ(d.engine.cpu_matmul, "f32");
}

TEST(Config, MalformedYamlIsAnErrorWithLine) {
  auto c = ParseConfig("engine:\n  threads: [1, 2\n", "conf.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("conf.yaml:"));
  auto top = ParseConfig("- a\n- b\n", "conf.yaml");
  ASSERT_FALSE(top.ok());
  EXPECT_THAT(top.status().message(), HasSubstr("top level must be a mapping"));
}

TEST(Config, OverridesFollowTheSameRules) {
  Config c;
  ASSERT_TRUE(ApplyOverride(c, "engine.threads", "3").ok());
  EXPECT_EQ(c.engine.threads, 3);
  EXPECT_FALSE(ApplyOverride(c, "engine.threads", "-1").ok());
  EXPECT_EQ(c.engine.threads, 3);
  EXPECT_FALSE(ApplyOverride(c, "engine.nope", "1").ok());
  // Rules between keys wait for ValidateConfig, so related keys can change together.
  ASSERT_TRUE(ApplyOverride(c, "engine.max_step_tokens", "4").ok());
  EXPECT_FALSE(ValidateConfig(c).ok());
  ASSERT_TRUE(ApplyOverride(c, "engine.max_batch_size", "4").ok());
  EXPECT_TRUE(ValidateConfig(c).ok());
  ASSERT_TRUE(ApplyOverride(c, "spelling.dictionary", "/d").ok());
  EXPECT_FALSE(ValidateConfig(c).ok());
  ASSERT_TRUE(ApplyOverride(c, "spelling.lexicon", "/l").ok());
  EXPECT_TRUE(ValidateConfig(c).ok());
}

TEST(Config, KvCacheLargerThanTheMachineIsRefusedNamingTheKeyAndTheLimit) {
  // Issue 12: 4,000,000 MB passed the range check, then the engine died of std::bad_alloc at
  // every restart.
  auto c = ParseConfig("engine:\n  kv_cache_mb: 4000000\n", "conf.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("engine.kv_cache_mb: 4000000 MB exceeds"));
  EXPECT_THAT(c.status().message(), HasSubstr(Megabytes(ProcessMemoryLimit().bytes)));
  Config o;
  ASSERT_TRUE(ApplyOverride(o, "engine.kv_cache_mb", "4000000").ok());
  EXPECT_THAT(ValidateConfig(o).message(), HasSubstr("engine.kv_cache_mb"));
  ASSERT_TRUE(ApplyOverride(o, "engine.kv_cache_mb", "64").ok());
  EXPECT_TRUE(ValidateConfig(o).ok());
}

TEST(Config, RelativeModelDirResolvesAgainstTheFile) {
  const std::string dir = gecd::testing::MakeTempDir();
  std::ofstream(dir + "/c.yaml") << "model:\n  dir: ../models/m\n";
  auto c = LoadConfigFile(dir + "/c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.dir, std::filesystem::path(dir).parent_path().string() + "/models/m");
  EXPECT_EQ(LoadConfigFile(dir + "/missing.yaml").status().code(), absl::StatusCode::kNotFound);
}

TEST(Config, SpellingNeedsBothPathsAndResolvesThemAgainstTheFile) {
  EXPECT_TRUE(Config().spelling.dictionary.empty());
  for (const char* half : {"spelling:\n  dictionary: /d\n", "spelling:\n  lexicon: l.tsv\n"}) {
    auto e = ParseConfig(half, "conf.yaml");
    ASSERT_FALSE(e.ok()) << half;
    EXPECT_THAT(e.status().message(), HasSubstr("spelling.dictionary and spelling.lexicon"));
  }
  EXPECT_FALSE(ParseConfig("spelling:\n  min_count: 0\n", "conf.yaml").ok());
  const std::string dir = gecd::testing::MakeTempDir();
  std::ofstream(dir + "/c.yaml") << "spelling:\n  dictionary: /usr/share/hunspell/en_US\n"
                                    "  lexicon: ../models/m/lexicon.tsv\n  min_count: 5\n";
  auto c = LoadConfigFile(dir + "/c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->spelling.dictionary, "/usr/share/hunspell/en_US");
  EXPECT_EQ(c->spelling.lexicon,
            std::filesystem::path(dir).parent_path().string() + "/models/m/lexicon.tsv");
  EXPECT_EQ(c->spelling.min_count, 5);
}

TEST(Config, TlsAndAuthKeysResolveAgainstTheFileAndNeedTheirPartners) {
  const Config defaults;
  EXPECT_TRUE(defaults.tls.cert_file.empty());
  EXPECT_TRUE(defaults.auth.tokens_file.empty());
  const std::string dir = gecd::testing::MakeTempDir();
  std::ofstream(dir + "/c.yaml") << "tls:\n  cert_file: tls/tls.crt\n  key_file: /k/tls.key\n"
                                    "  client_ca_file: ca.crt\n  require_client_cert: true\n"
                                    "  refresh_s: 2\nauth:\n  tokens_file: tokens\n"
                                    "  refresh_s: 3\n";
  auto c = LoadConfigFile(dir + "/c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tls.cert_file, dir + "/tls/tls.crt");
  EXPECT_EQ(c->tls.key_file, "/k/tls.key");
  EXPECT_EQ(c->tls.client_ca_file, dir + "/ca.crt");
  EXPECT_TRUE(c->tls.require_client_cert);
  EXPECT_EQ(c->tls.refresh_s, 2);
  EXPECT_EQ(c->auth.tokens_file, dir + "/tokens");
  EXPECT_EQ(c->auth.refresh_s, 3);

  const std::pair<const char*, const char*> bad[] = {
      {"tls:\n  cert_file: a.crt\n", "tls.cert_file and tls.key_file"},
      {"tls:\n  key_file: a.key\n", "tls.cert_file and tls.key_file"},
      {"tls:\n  client_ca_file: ca.crt\n", "tls.client_ca_file"},
      {"tls:\n  cert_file: a\n  key_file: b\n  require_client_cert: true\n",
       "tls.require_client_cert"},
      {"tls:\n  refresh_s: 0\n", "tls.refresh_s"},
      {"tls:\n  certfile: a\n", "unknown key 'tls.certfile'"},
      {"auth:\n  token_file: t\n", "unknown key 'auth.token_file'"},
  };
  for (const auto& [yaml, message] : bad) {
    auto e = ParseConfig(yaml, "conf.yaml");
    ASSERT_FALSE(e.ok()) << yaml;
    EXPECT_THAT(e.status().message(), HasSubstr(message)) << yaml;
  }
}

// metrics_tls has the tls section's shape and rules, its messages naming its own keys.
TEST(Config, MetricsTlsKeysResolveAgainstTheFileAndNeedTheirPartners) {
  const Config defaults;
  EXPECT_TRUE(defaults.metrics_tls.cert_file.empty());
  EXPECT_FALSE(defaults.metrics_tls.require_client_cert);
  EXPECT_EQ(defaults.metrics_tls.refresh_s, 5);
  const std::string dir = gecd::testing::MakeTempDir();
  std::ofstream(dir + "/c.yaml") << "metrics_tls:\n  cert_file: m/tls.crt\n  key_file: /k/m.key\n"
                                    "  client_ca_file: prom-ca.crt\n  require_client_cert: true\n"
                                    "  refresh_s: 7\n";
  auto c = LoadConfigFile(dir + "/c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metrics_tls.cert_file, dir + "/m/tls.crt");
  EXPECT_EQ(c->metrics_tls.key_file, "/k/m.key");
  EXPECT_EQ(c->metrics_tls.client_ca_file, dir + "/prom-ca.crt");
  EXPECT_TRUE(c->metrics_tls.require_client_cert);
  EXPECT_EQ(c->metrics_tls.refresh_s, 7);
  EXPECT_TRUE(c->tls.cert_file.empty());  // the gRPC listener's TLS is another section

  const std::pair<const char*, const char*> bad[] = {
      {"metrics_tls:\n  cert_file: a.crt\n",
       "metrics_tls.cert_file and metrics_tls.key_file: set both (TLS on the metrics listener)"},
      {"metrics_tls:\n  key_file: a.key\n", "metrics_tls.cert_file and metrics_tls.key_file"},
      {"metrics_tls:\n  client_ca_file: ca.crt\n",
       "metrics_tls.client_ca_file: client certificates need TLS (set metrics_tls.cert_file"},
      {"metrics_tls:\n  cert_file: a\n  key_file: b\n  require_client_cert: true\n",
       "metrics_tls.require_client_cert: needs metrics_tls.client_ca_file"},
      {"metrics_tls:\n  refresh_s: 0\n", "metrics_tls.refresh_s"},
      {"metrics_tls:\n  require_client_cert: maybe\n", "metrics_tls.require_client_cert"},
      {"metrics_tls:\n  certfile: a\n", "unknown key 'metrics_tls.certfile'"},
  };
  for (const auto& [yaml, message] : bad) {
    auto e = ParseConfig(yaml, "conf.yaml");
    ASSERT_FALSE(e.ok()) << yaml;
    EXPECT_THAT(e.status().message(), HasSubstr(message)) << yaml;
  }
  // Overrides take the same keys, and the rules apply once they all are.
  auto set =
      LoadConfigWithOverrides("", {"metrics_tls.cert_file=/m.crt", "metrics_tls.key_file=/m.key"});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->metrics_tls.cert_file, "/m.crt");
  auto half = LoadConfigWithOverrides("", {"metrics_tls.cert_file=/m.crt"});
  ASSERT_FALSE(half.ok());
  EXPECT_THAT(half.status().message(), HasSubstr("metrics_tls.key_file"));
}

TEST(Config, RouterTlsKeysResolveAgainstTheFileAndNeedTheirPartners) {
  const Config defaults;
  EXPECT_TRUE(defaults.route.upstream_tls.ca_file.empty());
  EXPECT_EQ(defaults.route.tls_handshake_timeout_ms, 10000);
  EXPECT_EQ(defaults.route.max_tls_handshakes, 1000);
  const std::string dir = gecd::testing::MakeTempDir();
  std::ofstream(dir + "/c.yaml") << "route:\n  tls_handshake_timeout_ms: 500\n"
                                    "  max_tls_handshakes: 7\n  upstream_tls:\n"
                                    "    ca_file: pods/ca.crt\n    cert_file: /c/tls.crt\n"
                                    "    key_file: client.key\n    server_name: gecd.svc\n"
                                    "    refresh_s: 2\n";
  auto c = LoadConfigFile(dir + "/c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const UpstreamTlsSection& up = c->route.upstream_tls;
  EXPECT_EQ(up.ca_file, dir + "/pods/ca.crt");
  EXPECT_EQ(up.cert_file, "/c/tls.crt");
  EXPECT_EQ(up.key_file, dir + "/client.key");
  EXPECT_EQ(up.server_name, "gecd.svc");
  EXPECT_EQ(up.refresh_s, 2);
  EXPECT_EQ(c->route.tls_handshake_timeout_ms, 500);
  EXPECT_EQ(c->route.max_tls_handshakes, 7);

  const std::pair<const char*, const char*> bad[] = {
      {"route:\n  upstream_tls:\n    ca_file: ca\n    cert_file: a\n",
       "route.upstream_tls.cert_file and route.upstream_tls.key_file"},
      {"route:\n  upstream_tls:\n    cert_file: a\n    key_file: b\n",
       "route.upstream_tls.ca_file: must be set"},
      {"route:\n  upstream_tls:\n    server_name: x\n", "route.upstream_tls.ca_file"},
      {"route:\n  max_tls_handshakes: 0\n", "route.max_tls_handshakes"},
      {"route:\n  upstream_tls:\n    cafile: a\n", "unknown key 'route.upstream_tls.cafile'"},
  };
  for (const auto& [yaml, message] : bad) {
    auto e = ParseConfig(yaml, "conf.yaml");
    ASSERT_FALSE(e.ok()) << yaml;
    EXPECT_THAT(e.status().message(), HasSubstr(message)) << yaml;
  }
}

// gecd serve's handshake timeout (gRPC's server handshake timeout; its default, 120 s, would let
// a flood of connections that never finish hold their sockets that long).
TEST(Config, ServerTlsHandshakeTimeout) {
  EXPECT_EQ(Config().server.tls_handshake_timeout_ms, 10000);
  auto c = ParseConfig("server:\n  tls_handshake_timeout_ms: 300\n", "conf.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.tls_handshake_timeout_ms, 300);
  auto e = ParseConfig("server:\n  tls_handshake_timeout_ms: 0\n", "conf.yaml");
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("server.tls_handshake_timeout_ms"));
}

// The cap on a worker's TLS handshakes in flight (worker/connection_gate.h).
TEST(Config, ServerMaxTlsHandshakes) {
  EXPECT_EQ(Config().server.max_tls_handshakes, 1000);
  auto c = ParseConfig("server:\n  max_tls_handshakes: 50\n", "conf.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.max_tls_handshakes, 50);
  for (const char* bad : {"0", "-3", "many"}) {
    auto e = ParseConfig(std::string("server:\n  max_tls_handshakes: ") + bad + "\n", "conf.yaml");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_THAT(e.status().message(), HasSubstr("server.max_tls_handshakes")) << bad;
  }
}

// How far below the engine's CPU priority the workers run (supervisor: SpawnProcess's nice).
TEST(Config, ServerWorkerNice) {
  EXPECT_EQ(Config().server.worker_nice, 5);
  for (const int ok : {0, 19}) {
    auto c = ParseConfig(absl::StrCat("server:\n  worker_nice: ", ok, "\n"), "conf.yaml");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->server.worker_nice, ok);
  }
  for (const char* bad : {"-1", "20", "low"}) {
    auto e = ParseConfig(std::string("server:\n  worker_nice: ") + bad + "\n", "conf.yaml");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_THAT(e.status().message(), HasSubstr("server.worker_nice")) << bad;
  }
}

TEST(Config, CopyBias) {
  EXPECT_EQ(Config().model.copy_bias, 0.0);
  auto c = ParseConfig("model:\n  copy_bias: 2.5\n", "conf.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->model.copy_bias, 2.5);
  EXPECT_TRUE(ParseConfig("model:\n  copy_bias: 0\n", "conf.yaml").ok());
  for (const char* bad : {"-1", "101", "lots"}) {
    auto e = ParseConfig(std::string("model:\n  copy_bias: ") + bad + "\n", "conf.yaml");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_THAT(e.status().message(), HasSubstr("model.copy_bias")) << bad;
  }
  // Both backends apply it.
  auto cuda = ParseConfig("model:\n  copy_bias: 2\nengine:\n  backend: cuda\n", "conf.yaml");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
}

TEST(Config, EchoStepDelayIsForTheEchoBackendOnly) {
  EXPECT_EQ(Config().engine.echo_step_ms, 0);
  auto c = ParseConfig("engine:\n  backend: echo\n  echo_step_ms: 20\n", "conf.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.echo_step_ms, 20);
  for (const char* bad : {"-1", "60001", "slow"}) {
    auto e = ParseConfig(absl::StrCat("engine:\n  backend: echo\n  echo_step_ms: ", bad, "\n"),
                         "conf.yaml");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_THAT(e.status().message(), HasSubstr("conf.yaml:3: engine.echo_step_ms")) << bad;
  }
  // A model backend with it set is a mistake, not a silently ignored key; 0 is fine anywhere.
  auto cpu = ParseConfig("engine:\n  backend: cpu\n  echo_step_ms: 5\n", "conf.yaml");
  ASSERT_FALSE(cpu.ok());
  EXPECT_THAT(
      cpu.status().message(),
      HasSubstr("engine.echo_step_ms: only the echo backend has it (engine.backend is cpu)"));
  EXPECT_TRUE(ParseConfig("engine:\n  backend: cpu\n  echo_step_ms: 0\n", "conf.yaml").ok());
  // On the command line the backend may come after the delay: the rule is checked at the end.
  Config o;
  ASSERT_TRUE(ApplyOverride(o, "engine.echo_step_ms", "20").ok());
  ASSERT_TRUE(ApplyOverride(o, "engine.backend", "echo").ok());
  EXPECT_TRUE(ValidateConfig(o).ok());
}

TEST(Config, AdmissionDrainAndStreamKeys) {
  auto defaults = ParseConfig("", "conf.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->server.slo_p99_ms, 1000);
  EXPECT_EQ(defaults->server.drain_quiet_ms, 500);
  EXPECT_EQ(defaults->server.max_streams_per_connection, 1024);
  auto c = ParseConfig(
      "server:\n  slo_p99_ms: 250\n  drain_quiet_ms: 50\n  max_streams_per_connection: 8\n",
      "conf.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.slo_p99_ms, 250);
  EXPECT_EQ(c->server.drain_quiet_ms, 50);
  EXPECT_EQ(c->server.max_streams_per_connection, 8);
  auto zero = ParseConfig("server:\n  max_streams_per_connection: 0\n", "conf.yaml");
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.status().message(), HasSubstr("server.max_streams_per_connection"));
  for (const char* bad_value : {"slo_p99_ms: 0", "slo_p99_ms: -1", "drain_quiet_ms: -1"}) {
    auto bad = ParseConfig(absl::StrCat("server:\n  ", bad_value, "\n"), "conf.yaml");
    ASSERT_FALSE(bad.ok()) << bad_value;
    EXPECT_THAT(bad.status().message(), HasSubstr("conf.yaml:2: server."));
  }
}

// A config written for an earlier version is told what replaced the key, in the file and in
// --set alike, instead of an unknown key or a silently different admission.
TEST(Config, TheReplacedMaxQueueKeyNamesItsReplacement) {
  auto old = ParseConfig("server:\n  max_queue_ms: 500\n", "conf.yaml");
  ASSERT_FALSE(old.ok());
  EXPECT_THAT(old.status().message(),
              HasSubstr("conf.yaml:2: server.max_queue_ms was replaced by server.slo_p99_ms"));
  Config o;
  absl::Status set = ApplyOverride(o, "server.max_queue_ms", "0");
  EXPECT_THAT(set.message(), HasSubstr("replaced by server.slo_p99_ms"));
}

TEST(Config, ShippedDefaultConfigParses) {
  auto c = LoadConfigFile(gecd::testing::SourceDir() + "/configs/gecd.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  // The unauthenticated HTTP endpoints stay on loopback unless an operator says otherwise.
  EXPECT_EQ(c->server.metrics_listen, "127.0.0.1:9100");
  EXPECT_EQ(c->route.metrics_listen, "127.0.0.1:9101");
}

TEST(Config, MetricsOnLoopbackAndReflectionOnUnlessTurnedOff) {
  auto defaults = ParseConfig("", "x.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->server.metrics_listen, "127.0.0.1:9100");
  EXPECT_EQ(defaults->route.metrics_listen, "127.0.0.1:9101");
  EXPECT_TRUE(defaults->server.reflection);
  EXPECT_TRUE(defaults->route.reflection);

  auto off = ParseConfig("server:\n  reflection: false\nroute:\n  reflection: false\n", "x.yaml");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->server.reflection);
  EXPECT_FALSE(off->route.reflection);

  auto bad = ParseConfig("server:\n  reflection: sometimes\n", "x.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("server.reflection"));
}

// deploy/k8s/router/configmap.yaml carries the router's gecd.yaml: the same rules apply to it.
TEST(Config, RouterConfigMapParses) {
  const YAML::Node config_map =
      YAML::LoadFile(gecd::testing::SourceDir() + "/deploy/k8s/router/configmap.yaml");
  auto c = ParseConfig(config_map["data"]["gecd.yaml"].as<std::string>(), "configmap.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->route.source, "kubernetes");
  EXPECT_EQ(c->route.kubernetes.service, "gecd-daemons");
  EXPECT_EQ(c->route.kubernetes.port, "grpc");
  EXPECT_EQ(c->route.listen, "0.0.0.0:50061");
}

TEST(Config, RouteSectionParsesEndpointsAsAListOrACommaString) {
  auto c = ParseConfig(R"(
route:
  policy: least_request
  endpoints:
    source: static
    static:
      - 10.0.0.1:50051
      - "[::1]:50052"
  kubernetes:
    service: gecd-pods
    port: grpc
)",
                       "r.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->route.policy, "least_request");
  EXPECT_THAT(c->route.static_endpoints, ::testing::ElementsAre("10.0.0.1:50051", "[::1]:50052"));
  EXPECT_EQ(c->route.kubernetes.service, "gecd-pods");
  ASSERT_TRUE(ApplyOverride(*c, "route.endpoints.static", "a:1, b:2").ok());
  EXPECT_THAT(c->route.static_endpoints, ::testing::ElementsAre("a:1", "b:2"));
}

TEST(Config, MalformedRouteEndpointsNameTheKeyAndLine) {
  for (const char* bad :
       {"static: [10.0.0.1]", "static: [\"h:0\"]", "static: [\"h:99999\"]", "static: [\":80\"]",
        "static: [\"::1:80\"]", "static: [[a:1]]", "dns: gecd-headless", "source: consul"}) {
    auto c = ParseConfig(absl::StrCat("route:\n  endpoints:\n    ", bad, "\n"), "r.yaml");
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_THAT(c.status().message(), HasSubstr("r.yaml:3")) << bad;
    EXPECT_THAT(c.status().message(), HasSubstr("route.endpoints.")) << bad;
  }
  Config d;
  EXPECT_THAT(ApplyOverride(d, "route.endpoints.static", "a:1,b").message(),
              HasSubstr("route.endpoints.static: expected host:port or [v6]:port, got 'b'"));
}

TEST(Config, RouteSourcesNeedTheirSettings) {
  auto empty = ParseConfig("route:\n  endpoints:\n    static: []\n", "r.yaml");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("route.endpoints.static: must list"));
  auto dns = ParseConfig("route:\n  endpoints:\n    source: dns\n", "r.yaml");
  ASSERT_FALSE(dns.ok());
  EXPECT_THAT(dns.status().message(), HasSubstr("route.endpoints.dns: must be set"));
  auto kube = ParseConfig("route:\n  endpoints:\n    source: kubernetes\n", "r.yaml");
  ASSERT_FALSE(kube.ok());
  EXPECT_THAT(kube.status().message(), HasSubstr("route.kubernetes.service: must be set"));
  auto ejection =
      ParseConfig("route:\n  ejection_base_ms: 5000\n  ejection_max_ms: 100\n", "r.yaml");
  ASSERT_FALSE(ejection.ok());
  EXPECT_THAT(ejection.status().message(), HasSubstr("route.ejection_max_ms (100)"));
}

}  // namespace
}  // namespace gecd::config
