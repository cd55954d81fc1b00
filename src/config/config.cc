#include "config/config.h"

#include <filesystem>
#include <functional>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/mapped_file.h"
#include "common/memory_limit.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace gecd::config {
namespace {

// One settable leaf of the config. The same table serves the YAML file and command-line
// overrides, so both accept exactly the same keys, types and ranges.
struct Field {
  std::string path;
  std::string kind;  // for messages: "an integer in [1, 64]", "one of cpu|cuda|echo"
  std::function<absl::Status(Config&, const std::string&)> set;
  bool list = false;  // takes a YAML sequence of scalars
};

// Where a field lives in Config: a function returning a reference to the member.
template <typename T>
using Ref = std::function<T&(Config&)>;

template <typename Section, typename T>
Ref<T> At(Section Config::*section, T Section::*member) {
  return [=](Config& c) -> T& { return (c.*section).*member; };
}

Field Int(std::string path, Ref<int> ref, int min, int max) {
  std::string kind = absl::StrCat("an integer in [", min, ", ", max, "]");
  return {path, kind, [=](Config& c, const std::string& v) -> absl::Status {
            int x;
            if (!absl::SimpleAtoi(v, &x) || x < min || x > max) {
              return absl::InvalidArgumentError(
                  absl::StrCat(path, ": expected ", kind, ", got '", v, "'"));
            }
            ref(c) = x;
            return absl::OkStatus();
          }};
}

template <typename Section>
Field Int(std::string path, Section Config::*section, int Section::*member, int min, int max) {
  return Int(std::move(path), At(section, member), min, max);
}

Field Enum(std::string path, Ref<std::string> ref, std::vector<std::string> allowed) {
  std::string kind = absl::StrCat("one of ", absl::StrJoin(allowed, "|"));
  return {path, kind, [=](Config& c, const std::string& v) -> absl::Status {
            for (const auto& a : allowed) {
              if (v == a) {
                ref(c) = v;
                return absl::OkStatus();
              }
            }
            return absl::InvalidArgumentError(
                absl::StrCat(path, ": expected ", kind, ", got '", v, "'"));
          }};
}

template <typename Section>
Field Enum(std::string path, Section Config::*section, std::string Section::*member,
           std::vector<std::string> allowed) {
  return Enum(std::move(path), At(section, member), std::move(allowed));
}

template <typename Section>
Field Double(std::string path, Section Config::*section, double Section::*member, double min,
             double max, bool min_allowed) {
  std::string kind = absl::StrCat("a number in ", min_allowed ? "[" : "(", min, ", ", max, "]");
  return {path, kind, [=](Config& c, const std::string& v) -> absl::Status {
            double x;
            if (!absl::SimpleAtod(v, &x) || !((min_allowed ? x >= min : x > min) && x <= max)) {
              return absl::InvalidArgumentError(
                  absl::StrCat(path, ": expected ", kind, ", got '", v, "'"));
            }
            (c.*section).*member = x;
            return absl::OkStatus();
          }};
}

template <typename Section>
Field Bool(std::string path, Section Config::*section, bool Section::*member) {
  return {path, "true or false", [=](Config& c, const std::string& v) -> absl::Status {
            if (v != "true" && v != "false") {
              return absl::InvalidArgumentError(
                  absl::StrCat(path, ": expected true or false, got '", v, "'"));
            }
            (c.*section).*member = v == "true";
            return absl::OkStatus();
          }};
}

// A comma-separated list of batch sizes in [1, 4096], or "" for none.
absl::StatusOr<std::vector<int>> ParseBatchSizes(const std::string& v) {
  std::vector<int> sizes;
  if (v.empty()) return sizes;
  for (absl::string_view item : absl::StrSplit(v, ',')) {
    int x;
    if (!absl::SimpleAtoi(item, &x) || x < 1 || x > 4096) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine.graph_batch_sizes: expected comma-separated sizes in [1, 4096] or \"\", got '", v,
          "'"));
    }
    sizes.push_back(x);
  }
  return sizes;
}

Field String(std::string path, Ref<std::string> ref, bool allow_empty) {
  return {path, "a string", [=](Config& c, const std::string& v) -> absl::Status {
            if (!allow_empty && v.empty()) {
              return absl::InvalidArgumentError(absl::StrCat(path, ": must not be empty"));
            }
            ref(c) = v;
            return absl::OkStatus();
          }};
}

template <typename Section>
Field String(std::string path, Section Config::*section, std::string Section::*member,
             bool allow_empty) {
  return String(std::move(path), At(section, member), allow_empty);
}

// "host:port" or "[v6]:port" with a port in [1, 65535]; `path` names the key in errors.
absl::Status CheckHostPort(absl::string_view path, absl::string_view v) {
  const size_t colon = v.rfind(':');
  absl::string_view host = colon == absl::string_view::npos ? v : v.substr(0, colon);
  int port = 0;
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (colon == absl::string_view::npos || host.empty() || (bracketed && host.size() == 2) ||
      (!bracketed && host.find_first_of("[]:") != absl::string_view::npos) ||
      !absl::SimpleAtoi(v.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected host:port or [v6]:port, got '", v, "'"));
  }
  return absl::OkStatus();
}

// A list of host:port endpoints: a YAML sequence in the file, comma-separated on the command
// line (the file's sequence reaches the setter joined the same way).
Field HostPortList(std::string path, Ref<std::vector<std::string>> ref) {
  return {path, "a list of host:port",
          [=](Config& c, const std::string& v) -> absl::Status {
            std::vector<std::string> items;
            if (!v.empty()) {
              for (absl::string_view item : absl::StrSplit(v, ',')) {
                item = absl::StripAsciiWhitespace(item);
                RETURN_IF_ERROR(CheckHostPort(path, item));
                items.emplace_back(item);
              }
            }
            ref(c) = std::move(items);
            return absl::OkStatus();
          },
          /*list=*/true};
}

// The keys of a TLS section (tls, metrics_tls): one shape, one set of types and ranges.
void AppendTlsFields(const std::string& section, TlsSection Config::*member,
                     std::vector<Field>& fields) {
  fields.push_back(String(section + ".cert_file", member, &TlsSection::cert_file, true));
  fields.push_back(String(section + ".key_file", member, &TlsSection::key_file, true));
  fields.push_back(String(section + ".client_ca_file", member, &TlsSection::client_ca_file, true));
  fields.push_back(
      Bool(section + ".require_client_cert", member, &TlsSection::require_client_cert));
  fields.push_back(Int(section + ".refresh_s", member, &TlsSection::refresh_s, 1, 24 * 3600));
}

// `fields` with the keys of both TLS sections after them.
std::vector<Field> WithTlsSections(std::vector<Field> fields) {
  AppendTlsFields("tls", &Config::tls, fields);
  AppendTlsFields("metrics_tls", &Config::metrics_tls, fields);
  return fields;
}

const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = WithTlsSections({
      String("model.dir", &Config::model, &ModelSection::dir, false),
      String("model.prompt_template", &Config::model, &ModelSection::prompt_template, false),
      Int("model.max_input_tokens", &Config::model, &ModelSection::max_input_tokens, 1, 1 << 20),
      Int("model.max_output_tokens", &Config::model, &ModelSection::max_output_tokens, 1, 1 << 20),
      Double("model.copy_bias", &Config::model, &ModelSection::copy_bias, 0.0, 100.0,
             /*min_allowed=*/true),
      Enum("engine.backend", &Config::engine, &EngineSection::backend, {"cpu", "cuda", "echo"}),
      Int("engine.threads", &Config::engine, &EngineSection::threads, 0, 1024),
      Enum("engine.cpu_isa", &Config::engine, &EngineSection::cpu_isa,
           {"auto", "avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni", "avx512_core_bf16",
            "avx512_core_amx"}),
      Enum("engine.cpu_matmul", &Config::engine, &EngineSection::cpu_matmul,
           {"auto", "f32", "bf16"}),
      Int("engine.kv_block_size", &Config::engine, &EngineSection::kv_block_size, 1, 1024),
      Int("engine.kv_cache_blocks", &Config::engine, &EngineSection::kv_cache_blocks, 0, 1 << 24),
      Int("engine.kv_cache_mb", &Config::engine, &EngineSection::kv_cache_mb, 1, 1 << 22),
      Int("engine.max_batch_size", &Config::engine, &EngineSection::max_batch_size, 1, 4096),
      Int("engine.max_step_tokens", &Config::engine, &EngineSection::max_step_tokens, 1, 1 << 20),
      Int("engine.speculate_tokens", &Config::engine, &EngineSection::speculate_tokens, 0, 256),
      Int("engine.device", &Config::engine, &EngineSection::device, 0, 63),
      Double("engine.kv_cache_memory_fraction", &Config::engine,
             &EngineSection::kv_cache_memory_fraction, 0.0, 0.95, /*min_allowed=*/false),
      Field{"engine.graph_batch_sizes", "comma-separated batch sizes",
            [](Config& c, const std::string& v) -> absl::Status {
              RETURN_IF_ERROR(ParseBatchSizes(v).status());
              c.engine.graph_batch_sizes = v;
              return absl::OkStatus();
            }},
      Enum("engine.quantization", &Config::engine, &EngineSection::quantization,
           {"fp8", "none", "int8"}),
      Bool("engine.attention_fp8", &Config::engine, &EngineSection::attention_fp8),
      Enum("engine.fp8_scaling", &Config::engine, &EngineSection::fp8_scaling,
           {"per_channel", "per_tensor"}),
      Int("engine.echo_step_ms", &Config::engine, &EngineSection::echo_step_ms, 0, 60 * 1000),
      String("server.listen", &Config::server, &ServerSection::listen, false),
      Int("server.workers", &Config::server, &ServerSection::workers, 0, 256),
      Int("server.worker_nice", &Config::server, &ServerSection::worker_nice, 0, 19),
      Int("server.max_in_flight", &Config::server, &ServerSection::max_in_flight, 1, 1 << 20),
      Int("server.slo_p99_ms", &Config::server, &ServerSection::slo_p99_ms, 1, 3600 * 1000),
      Int("server.max_refusals_per_second", &Config::server,
          &ServerSection::max_refusals_per_second, 0, 1000 * 1000),
      Int("server.max_input_chars", &Config::server, &ServerSection::max_input_chars, 1, 1 << 20),
      Int("server.sentence_cache_mb", &Config::server, &ServerSection::sentence_cache_mb, 0,
          1 << 16),
      Int("server.max_streams_per_connection", &Config::server,
          &ServerSection::max_streams_per_connection, 1, 1 << 20),
      Int("server.grace_period_ms", &Config::server, &ServerSection::grace_period_ms, 0,
          3600 * 1000),
      Int("server.drain_quiet_ms", &Config::server, &ServerSection::drain_quiet_ms, 0, 3600 * 1000),
      Int("server.tls_handshake_timeout_ms", &Config::server,
          &ServerSection::tls_handshake_timeout_ms, 1, 3600 * 1000),
      Int("server.max_tls_handshakes", &Config::server, &ServerSection::max_tls_handshakes, 1,
          1 << 20),
      String("server.metrics_listen", &Config::server, &ServerSection::metrics_listen, false),
      Int("server.ring_slots", &Config::server, &ServerSection::ring_slots, 2, 1 << 20),
      Int("server.ring_slot_bytes", &Config::server, &ServerSection::ring_slot_bytes, 256, 1 << 20),
      Bool("server.reflection", &Config::server, &ServerSection::reflection),
      String("spelling.dictionary", &Config::spelling, &SpellingSection::dictionary, true),
      String("spelling.lexicon", &Config::spelling, &SpellingSection::lexicon, true),
      Int("spelling.min_count", &Config::spelling, &SpellingSection::min_count, 1, 1 << 30),
      Int("spelling.instances", &Config::spelling, &SpellingSection::instances, 1, 256),
      Int("spelling.max_lookups", &Config::spelling, &SpellingSection::max_lookups, 0, 1 << 20),
      Int("spelling.budget_ms", &Config::spelling, &SpellingSection::budget_ms, 1, 60 * 1000),
      String("route.listen", &Config::route, &RouteSection::listen, false),
      String("route.metrics_listen", &Config::route, &RouteSection::metrics_listen, false),
      Bool("route.reflection", &Config::route, &RouteSection::reflection),
      Enum("route.policy", &Config::route, &RouteSection::policy,
           {"p2c", "round_robin", "least_request"}),
      Int("route.max_in_flight", &Config::route, &RouteSection::max_in_flight, 1, 1 << 24),
      Int("route.channels_per_endpoint", &Config::route, &RouteSection::channels_per_endpoint, 1,
          64),
      Int("route.slow_start_s", &Config::route, &RouteSection::slow_start_s, 0, 3600),
      Double("route.slow_start_min_weight", &Config::route, &RouteSection::slow_start_min_weight,
             0.0, 1.0, /*min_allowed=*/false),
      Double("route.slow_start_aggression", &Config::route, &RouteSection::slow_start_aggression,
             0.0, 100.0, /*min_allowed=*/false),
      Int("route.ejection_failures", &Config::route, &RouteSection::ejection_failures, 1, 1000),
      Int("route.ejection_base_ms", &Config::route, &RouteSection::ejection_base_ms, 1,
          3600 * 1000),
      Int("route.ejection_max_ms", &Config::route, &RouteSection::ejection_max_ms, 1, 3600 * 1000),
      Int("route.grace_period_ms", &Config::route, &RouteSection::grace_period_ms, 0, 3600 * 1000),
      Int("route.drain_quiet_ms", &Config::route, &RouteSection::drain_quiet_ms, 0, 3600 * 1000),
      Int("route.threads", &Config::route, &RouteSection::threads, 0, 1024),
      Enum("route.endpoints.source", At(&Config::route, &RouteSection::source),
           {"static", "dns", "kubernetes"}),
      HostPortList("route.endpoints.static", At(&Config::route, &RouteSection::static_endpoints)),
      Field{"route.endpoints.dns", "a string",
            [](Config& c, const std::string& v) -> absl::
                                                    Status {
                                                      if (!v.empty())
                                                        RETURN_IF_ERROR(CheckHostPort(
                                                            "route.endpoints.dns", v));
                                                      c.route.dns = v;
                                                      return absl::OkStatus();
                                                    }},
      Int("route.dns_refresh_s", &Config::route, &RouteSection::dns_refresh_s, 1, 3600),
      Int("route.tls_handshake_timeout_ms", &Config::route, &RouteSection::tls_handshake_timeout_ms,
          1, 3600 * 1000),
      Int("route.max_tls_handshakes", &Config::route, &RouteSection::max_tls_handshakes, 1,
          1 << 20),
      String(
          "route.upstream_tls.ca_file",
          [](Config& c) -> std::string& { return c.route.upstream_tls.ca_file; }, true),
      String(
          "route.upstream_tls.cert_file",
          [](Config& c) -> std::string& { return c.route.upstream_tls.cert_file; }, true),
      String(
          "route.upstream_tls.key_file",
          [](Config& c) -> std::string& { return c.route.upstream_tls.key_file; }, true),
      String(
          "route.upstream_tls.server_name",
          [](Config& c) -> std::string& { return c.route.upstream_tls.server_name; }, true),
      Int(
          "route.upstream_tls.refresh_s",
          [](Config& c) -> int& { return c.route.upstream_tls.refresh_s; }, 1, 24 * 3600),
      String(
          "route.kubernetes.service",
          [](Config& c) -> std::string& { return c.route.kubernetes.service; }, true),
      String(
          "route.kubernetes.namespace",
          [](Config& c) -> std::string& { return c.route.kubernetes.namespace_; }, true),
      String(
          "route.kubernetes.port",
          [](Config& c) -> std::string& { return c.route.kubernetes.port; }, false),
      String(
          "route.kubernetes.kubeconfig",
          [](Config& c) -> std::string& { return c.route.kubernetes.kubeconfig; }, true),
      Int(
          "route.kubernetes.token_refresh_s",
          [](Config& c) -> int& { return c.route.kubernetes.token_refresh_s; }, 1, 24 * 3600),
      String("auth.tokens_file", &Config::auth, &AuthSection::tokens_file, true),
      Int("auth.refresh_s", &Config::auth, &AuthSection::refresh_s, 1, 24 * 3600),
      Enum("logging.level", &Config::logging, &LoggingSection::level,
           {"trace", "debug", "info", "warn", "error"}),
      Enum("logging.format", &Config::logging, &LoggingSection::format, {"text", "json"}),
  });
  return fields;
}

const Field* FindField(std::string_view path) {
  for (const Field& f : Fields()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

bool IsSection(std::string_view path) {
  const std::string prefix = absl::StrCat(std::string(path), ".");
  for (const Field& f : Fields()) {
    if (f.path.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::string Where(std::string_view file, const YAML::Mark& mark) {
  return absl::StrCat(file.empty() ? "<config>" : std::string(file), ":", mark.line + 1);
}

absl::Status Invalid(std::string_view file, const YAML::Mark& mark, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(Where(file, mark), ": ", std::string(message)));
}

// Why `path` is not a key: unknown, or a key of an earlier version and what replaced it.
std::string UnknownKey(std::string_view path) {
  if (path == "server.max_queue_ms") {
    // A fixed queue time shorter than the objective refused what could be served in time.
    return "server.max_queue_ms was replaced by server.slo_p99_ms (the latency objective "
           "admission holds each whole answer to); remove it";
  }
  return absl::StrCat("unknown key '", std::string(path), "'");
}

absl::Status Walk(const YAML::Node& node, const std::string& prefix, std::string_view file,
                  Config& config) {
  for (const auto& kv : node) {
    const YAML::Node& key = kv.first;
    const YAML::Node& value = kv.second;
    if (!key.IsScalar()) return Invalid(file, key.Mark(), "keys must be plain strings");
    const std::string path =
        prefix.empty() ? key.Scalar() : absl::StrCat(prefix, ".", key.Scalar());
    if (const Field* field = FindField(path)) {
      if (field->list && (value.IsSequence() || value.IsNull())) {
        std::vector<std::string> items;
        for (const YAML::Node& item : value) {
          if (!item.IsScalar()) {
            return Invalid(file, item.Mark(), absl::StrCat(path, ": expected ", field->kind));
          }
          items.push_back(item.Scalar());
        }
        if (absl::Status s = field->set(config, absl::StrJoin(items, ",")); !s.ok()) {
          return Invalid(file, value.Mark(), std::string(s.message()));
        }
        continue;
      }
      if (!value.IsScalar()) {
        return Invalid(file, value.Mark(), absl::StrCat(path, ": expected ", field->kind));
      }
      if (absl::Status s = field->set(config, value.Scalar()); !s.ok()) {
        return Invalid(file, value.Mark(), std::string(s.message()));
      }
    } else if (IsSection(path)) {
      if (value.IsNull()) continue;  // "engine:" with nothing under it keeps the defaults
      if (!value.IsMap()) {
        return Invalid(file, value.Mark(), absl::StrCat(path, ": expected a mapping"));
      }
      RETURN_IF_ERROR(Walk(value, path, file, config));
    } else {
      return Invalid(file, key.Mark(), UnknownKey(path));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Config> ParseConfig(std::string_view yaml, std::string_view path) {
  Config config;
  config.path = std::string(path);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
    if (root.IsNull()) return config;
    if (!root.IsMap()) return Invalid(path, root.Mark(), "the top level must be a mapping");
    RETURN_IF_ERROR(Walk(root, "", path, config));
  } catch (const YAML::Exception& e) {
    return Invalid(path, e.mark, e.msg);
  }
  if (absl::Status s = ValidateConfig(config); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": ", s.message()));
  }
  return config;
}

namespace {

// The keys that name files, with where they live in Config.
struct PathField {
  const char* key;
  std::string& (*value)(Config&);
};

constexpr PathField kPathFields[] = {
    {"model.dir", [](Config& c) -> std::string& { return c.model.dir; }},
    {"spelling.dictionary", [](Config& c) -> std::string& { return c.spelling.dictionary; }},
    {"spelling.lexicon", [](Config& c) -> std::string& { return c.spelling.lexicon; }},
    {"route.kubernetes.kubeconfig",
     [](Config& c) -> std::string& { return c.route.kubernetes.kubeconfig; }},
    {"route.upstream_tls.ca_file",
     [](Config& c) -> std::string& { return c.route.upstream_tls.ca_file; }},
    {"route.upstream_tls.cert_file",
     [](Config& c) -> std::string& { return c.route.upstream_tls.cert_file; }},
    {"route.upstream_tls.key_file",
     [](Config& c) -> std::string& { return c.route.upstream_tls.key_file; }},
    {"tls.cert_file", [](Config& c) -> std::string& { return c.tls.cert_file; }},
    {"tls.key_file", [](Config& c) -> std::string& { return c.tls.key_file; }},
    {"tls.client_ca_file", [](Config& c) -> std::string& { return c.tls.client_ca_file; }},
    {"metrics_tls.cert_file", [](Config& c) -> std::string& { return c.metrics_tls.cert_file; }},
    {"metrics_tls.key_file", [](Config& c) -> std::string& { return c.metrics_tls.key_file; }},
    {"metrics_tls.client_ca_file",
     [](Config& c) -> std::string& { return c.metrics_tls.client_ca_file; }},
    {"auth.tokens_file", [](Config& c) -> std::string& { return c.auth.tokens_file; }},
};

}  // namespace

const std::vector<std::string>& PathKeys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const PathField& f : kPathFields) k.push_back(f.key);
    return k;
  }();
  return keys;
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  ASSIGN_OR_RETURN(Config config, ParseConfig(text, path));
  // Relative paths are relative to the config file, so the config works from any working
  // directory (systemd starts services in /).
  for (const PathField& f : kPathFields) {
    std::string& file = f.value(config);
    const std::filesystem::path p(file);
    if (!file.empty() && p.is_relative()) {
      file = (std::filesystem::path(path).parent_path() / p).lexically_normal().string();
    }
  }
  return config;
}

absl::Status ApplyOverride(Config& config, std::string_view key_path, std::string_view value) {
  const Field* field = FindField(key_path);
  if (field == nullptr) return absl::InvalidArgumentError(UnknownKey(key_path));
  return field->set(config, std::string(value));
}

// Checks relations between fields that no single range can express.
absl::StatusOr<Config> LoadConfigWithOverrides(const std::string& path,
                                               const std::vector<std::string>& overrides) {
  Config config;
  if (!path.empty()) {
    ASSIGN_OR_RETURN(config, LoadConfigFile(path));
  }
  for (const std::string& kv : overrides) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--set wants KEY=VALUE, got '", kv, "'"));
    }
    RETURN_IF_ERROR(ApplyOverride(config, kv.substr(0, eq), kv.substr(eq + 1)));
  }
  RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

namespace {

// The rules between the keys of a TLS section (tls, metrics_tls); `section` names it in the
// messages, `listener` says what it secures.
absl::Status ValidateTls(const TlsSection& tls, absl::string_view section,
                         absl::string_view listener) {
  const auto key = [section](absl::string_view name) { return absl::StrCat(section, ".", name); };
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(key("cert_file"), " and ", key("key_file"),
                                                   ": set both (TLS on ", listener,
                                                   ") or neither"));
  }
  if (!tls.client_ca_file.empty() && tls.cert_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key("client_ca_file"), ": client certificates need TLS (set ",
                     key("cert_file"), " and ", key("key_file"), ")"));
  }
  if (tls.require_client_cert && tls.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key("require_client_cert"), ": needs ", key("client_ca_file"),
                     " (the CAs client certificates are verified against)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateConfig(const Config& c) {
  if (c.model.prompt_template.find("{text}") == std::string::npos) {
    return absl::InvalidArgumentError("model.prompt_template: must contain {text}");
  }
  if (c.engine.max_step_tokens < c.engine.max_batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.max_step_tokens (", c.engine.max_step_tokens,
                     ") must be at least engine.max_batch_size (", c.engine.max_batch_size,
                     ") so every running sequence can decode in one step"));
  }
  if (c.engine.echo_step_ms > 0 && c.engine.backend != "echo") {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.echo_step_ms: only the echo backend has it (engine.backend is ",
                     c.engine.backend, ")"));
  }
  if (c.spelling.dictionary.empty() != c.spelling.lexicon.empty()) {
    return absl::InvalidArgumentError(
        "spelling.dictionary and spelling.lexicon: set both (the spelling stage) or neither");
  }
  // The KV cache alone larger than the memory this process may use can only end in a failed
  // allocation or the OOM killer, at every engine start. (engine.kv_cache_blocks needs the
  // model's block size: the backend checks it when it is created.)
  const MemoryLimit& memory = ProcessMemoryLimit();
  if (static_cast<uint64_t>(c.engine.kv_cache_mb) << 20 > memory.bytes) {
    return absl::InvalidArgumentError(absl::StrCat("engine.kv_cache_mb: ", c.engine.kv_cache_mb,
                                                   " MB exceeds the memory this process may use (",
                                                   Megabytes(memory.bytes), ", ", memory.source,
                                                   ")"));
  }
  const RouteSection& r = c.route;
  if (r.source == "static" && r.static_endpoints.empty()) {
    return absl::InvalidArgumentError(
        "route.endpoints.static: must list at least one host:port when route.endpoints.source "
        "is static");
  }
  if (r.source == "dns" && r.dns.empty()) {
    return absl::InvalidArgumentError(
        "route.endpoints.dns: must be set (name:port) when route.endpoints.source is dns");
  }
  if (r.source == "kubernetes" && r.kubernetes.service.empty()) {
    return absl::InvalidArgumentError(
        "route.kubernetes.service: must be set when route.endpoints.source is kubernetes");
  }
  if (r.ejection_max_ms < r.ejection_base_ms) {
    return absl::InvalidArgumentError(absl::StrCat("route.ejection_max_ms (", r.ejection_max_ms,
                                                   ") must be at least route.ejection_base_ms (",
                                                   r.ejection_base_ms, ")"));
  }
  RETURN_IF_ERROR(ValidateTls(c.tls, "tls", "the gRPC listener"));
  RETURN_IF_ERROR(ValidateTls(c.metrics_tls, "metrics_tls", "the metrics listener"));
  const UpstreamTlsSection& up = r.upstream_tls;
  if (up.cert_file.empty() != up.key_file.empty()) {
    return absl::InvalidArgumentError(
        "route.upstream_tls.cert_file and route.upstream_tls.key_file: set both (the router's "
        "client certificate) or neither");
  }
  if (up.ca_file.empty() && (!up.cert_file.empty() || !up.server_name.empty())) {
    return absl::InvalidArgumentError(
        "route.upstream_tls.ca_file: must be set with the rest of route.upstream_tls (the CAs "
        "the endpoints' certificates are verified against)");
  }
  if ((c.server.ring_slots & (c.server.ring_slots - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.ring_slots: must be a power of two, got ", c.server.ring_slots));
  }
  return absl::OkStatus();
}

std::vector<int> GraphBatchSizes(const EngineSection& engine) {
  return ParseBatchSizes(engine.graph_batch_sizes).value_or(std::vector<int>{});
}

}  // namespace gecd::config
