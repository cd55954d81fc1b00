#include "route/kube_config.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "yaml-cpp/yaml.h"

namespace gecd::route {
namespace {

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Readable(const std::string& path) {
  return std::filesystem::is_regular_file(path) && access(path.c_str(), R_OK) == 0;
}

// The reading of one kubeconfig file: errors carry the key, the path and the field.
class KubeconfigReader {
 public:
  explicit KubeconfigReader(const std::string& path)
      : path_(path), dir_(std::filesystem::path(path).parent_path()) {}

  absl::Status Error(absl::string_view field, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("route.kubernetes.kubeconfig: ", path_, ": ", field, ": ", what));
  }

  // The `inner` map of the entry of `list` named `name` (kubeconfig's named lists: clusters,
  // contexts, users).
  absl::StatusOr<YAML::Node> Named(const YAML::Node& root, const char* list, const char* inner,
                                   const std::string& name) const {
    const YAML::Node entries = root[list];
    if (!entries.IsDefined() || entries.IsNull()) return Error(list, "missing");
    if (!entries.IsSequence()) return Error(list, "not a list");
    for (const YAML::Node& entry : entries) {
      if (!entry.IsMap() || !entry["name"].IsScalar() || entry["name"].Scalar() != name) continue;
      const YAML::Node value = entry[inner];
      const std::string field = absl::StrCat(list, "[", name, "].", inner);
      if (!value.IsDefined() || value.IsNull()) return Error(field, "missing");
      if (!value.IsMap()) return Error(field, "not a map");
      return value;
    }
    return Error(list, absl::StrCat("no entry named \"", name, "\""));
  }

  // A string field; "" when absent.
  absl::StatusOr<std::string> String(const YAML::Node& map, const std::string& field_prefix,
                                     const char* key) const {
    const YAML::Node value = map[key];
    if (!value.IsDefined() || value.IsNull()) return std::string();
    if (!value.IsScalar()) return Error(absl::StrCat(field_prefix, key), "not a string");
    return value.Scalar();
  }

  // A file a field names, relative to the kubeconfig's folder, which must be readable.
  absl::StatusOr<std::string> File(const YAML::Node& map, const std::string& field_prefix,
                                   const char* key) const {
    absl::StatusOr<std::string> name = String(map, field_prefix, key);
    if (!name.ok() || name->empty()) return name;
    std::filesystem::path p(*name);
    if (p.is_relative()) p = (dir_ / p).lexically_normal();
    if (!Readable(p.string())) {
      return Error(absl::StrCat(field_prefix, key), absl::StrCat("cannot read ", p.string()));
    }
    return p.string();
  }

  // A *-data field: base64 of PEM.
  absl::StatusOr<std::string> PemData(const YAML::Node& map, const std::string& field_prefix,
                                      const char* key) const {
    absl::StatusOr<std::string> b64 = String(map, field_prefix, key);
    if (!b64.ok() || b64->empty()) return b64;
    std::string pem;
    if (!absl::Base64Unescape(absl::StripAsciiWhitespace(*b64), &pem)) {
      return Error(absl::StrCat(field_prefix, key), "not valid base64");
    }
    if (!absl::StrContains(pem, "-----BEGIN ")) {
      return Error(absl::StrCat(field_prefix, key), "not PEM (no \"-----BEGIN\" line)");
    }
    return pem;
  }

  absl::StatusOr<KubeApiConfig> Read(const YAML::Node& root) const {
    if (!root.IsMap()) return Error("(top level)", "not a map");
    absl::StatusOr<std::string> context_name = String(root, "", "current-context");
    if (!context_name.ok()) return context_name.status();
    if (context_name->empty()) return Error("current-context", "missing");
    absl::StatusOr<YAML::Node> context = Named(root, "contexts", "context", *context_name);
    if (!context.ok()) return context.status();
    const std::string context_field = absl::StrCat("contexts[", *context_name, "].context.");
    absl::StatusOr<std::string> cluster_name = String(*context, context_field, "cluster");
    absl::StatusOr<std::string> user_name = String(*context, context_field, "user");
    absl::StatusOr<std::string> namespace_ = String(*context, context_field, "namespace");
    for (const auto* s : {&cluster_name, &user_name, &namespace_}) {
      if (!s->ok()) return s->status();
    }
    if (cluster_name->empty()) return Error(absl::StrCat(context_field, "cluster"), "missing");

    KubeApiConfig config;
    config.namespace_ = *namespace_;
    absl::StatusOr<YAML::Node> cluster = Named(root, "clusters", "cluster", *cluster_name);
    if (!cluster.ok()) return cluster.status();
    const std::string cluster_field = absl::StrCat("clusters[", *cluster_name, "].cluster.");
    absl::StatusOr<std::string> server = String(*cluster, cluster_field, "server");
    absl::StatusOr<std::string> ca_file = File(*cluster, cluster_field, "certificate-authority");
    absl::StatusOr<std::string> ca_pem =
        PemData(*cluster, cluster_field, "certificate-authority-data");
    for (const auto* s : {&server, &ca_file, &ca_pem}) {
      if (!s->ok()) return s->status();
    }
    if (server->empty()) return Error(absl::StrCat(cluster_field, "server"), "missing");
    if (!absl::StartsWith(*server, "https://") && !absl::StartsWith(*server, "http://")) {
      return Error(absl::StrCat(cluster_field, "server"),
                   absl::StrCat("\"", *server, "\" is not an https:// or http:// URL"));
    }
    config.server = std::string(absl::StripSuffix(*server, "/"));
    config.ca_file = *std::move(ca_file);
    config.ca_pem = *std::move(ca_pem);
    if (!config.ca_file.empty() && !config.ca_pem.empty()) {
      return Error(absl::StrCat(cluster_field, "certificate-authority"),
                   "set together with certificate-authority-data; keep one");
    }
    const YAML::Node insecure = (*cluster)["insecure-skip-tls-verify"];
    if (insecure.IsDefined() && !insecure.IsNull()) {
      bool value = false;
      if (!insecure.IsScalar() || !YAML::convert<bool>::decode(insecure, value)) {
        return Error(absl::StrCat(cluster_field, "insecure-skip-tls-verify"), "not a boolean");
      }
      config.insecure_skip_tls_verify = value;
    }

    if (user_name->empty()) return config;  // no credentials (e.g. kubectl proxy)
    absl::StatusOr<YAML::Node> user = Named(root, "users", "user", *user_name);
    if (!user.ok()) return user.status();
    const std::string user_field = absl::StrCat("users[", *user_name, "].user.");
    for (const char* unsupported : {"exec", "auth-provider", "username", "password"}) {
      if ((*user)[unsupported].IsDefined()) {
        return Error(absl::StrCat(user_field, unsupported),
                     "not supported; use token, tokenFile or client-certificate/client-key");
      }
    }
    absl::StatusOr<std::string> token = String(*user, user_field, "token");
    absl::StatusOr<std::string> token_file = File(*user, user_field, "tokenFile");
    absl::StatusOr<std::string> cert_file = File(*user, user_field, "client-certificate");
    absl::StatusOr<std::string> cert_pem = PemData(*user, user_field, "client-certificate-data");
    absl::StatusOr<std::string> key_file = File(*user, user_field, "client-key");
    absl::StatusOr<std::string> key_pem = PemData(*user, user_field, "client-key-data");
    for (const auto* s : {&token, &token_file, &cert_file, &cert_pem, &key_file, &key_pem}) {
      if (!s->ok()) return s->status();
    }
    if (!cert_file->empty() && !cert_pem->empty()) {
      return Error(absl::StrCat(user_field, "client-certificate"),
                   "set together with client-certificate-data; keep one");
    }
    if (!key_file->empty() && !key_pem->empty()) {
      return Error(absl::StrCat(user_field, "client-key"),
                   "set together with client-key-data; keep one");
    }
    const bool has_cert = !cert_file->empty() || !cert_pem->empty();
    const bool has_key = !key_file->empty() || !key_pem->empty();
    if (has_cert != has_key) {
      return Error(absl::StrCat(user_field, has_cert ? "client-key" : "client-certificate"),
                   "missing (a client certificate needs its key)");
    }
    config.token = *std::move(token);
    config.token_file = *std::move(token_file);
    config.client_cert_file = *std::move(cert_file);
    config.client_cert_pem = *std::move(cert_pem);
    config.client_key_file = *std::move(key_file);
    config.client_key_pem = *std::move(key_pem);
    return config;
  }

 private:
  const std::string path_;
  const std::filesystem::path dir_;
};

}  // namespace

InClusterEnvironment InClusterEnvironment::FromProcess() {
  InClusterEnvironment env;
  if (const char* host = std::getenv("KUBERNETES_SERVICE_HOST")) env.service_host = host;
  if (const char* port = std::getenv("KUBERNETES_SERVICE_PORT")) env.service_port = port;
  return env;
}

absl::StatusOr<KubeApiConfig> InClusterConfig(const InClusterEnvironment& env) {
  const std::string& service_host = env.service_host;
  const std::string& service_port = env.service_port;
  constexpr absl::string_view kOutside =
      "; outside a cluster, set route.kubernetes.kubeconfig to a kubeconfig file";
  if (service_host.empty() || service_port.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("route.kubernetes.kubeconfig is empty (in-cluster configuration) but ",
                     service_host.empty() ? "KUBERNETES_SERVICE_HOST" : "KUBERNETES_SERVICE_PORT",
                     " is not set", kOutside));
  }
  int port = 0;
  if (!absl::SimpleAtoi(service_port, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("KUBERNETES_SERVICE_PORT: \"", service_port, "\" is not a port number"));
  }
  KubeApiConfig config;
  const bool v6 = absl::StrContains(service_host, ':') && !absl::StartsWith(service_host, "[");
  config.server = absl::StrCat("https://", v6 ? "[" : "", service_host, v6 ? "]" : "", ":", port);
  const std::filesystem::path dir(env.service_account_dir);
  config.token_file = (dir / "token").string();
  config.ca_file = (dir / "ca.crt").string();
  for (const std::string* file : {&config.token_file, &config.ca_file}) {
    if (!Readable(*file)) {
      return absl::FailedPreconditionError(
          absl::StrCat("route.kubernetes.kubeconfig is empty (in-cluster configuration) but the "
                       "service-account file ",
                       *file, " cannot be read", kOutside));
    }
  }
  if (const std::string ns_file = (dir / "namespace").string(); Readable(ns_file)) {
    absl::StatusOr<std::string> ns = ReadSmallFile(ns_file);
    if (!ns.ok()) return ns.status();
    config.namespace_ = std::string(absl::StripAsciiWhitespace(*ns));
  }
  return config;
}

absl::StatusOr<KubeApiConfig> LoadKubeconfig(const std::string& path) {
  const KubeconfigReader reader(path);
  absl::StatusOr<std::string> text = ReadSmallFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("route.kubernetes.kubeconfig: ", text.status().message()));
  }
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return reader.Error(absl::StrCat("line ", e.mark.line + 1), e.msg);
  }
  try {
    return reader.Read(root);
  } catch (const YAML::Exception& e) {  // yaml-cpp throws on some malformed shapes
    return reader.Error(absl::StrCat("line ", e.mark.line + 1), e.msg);
  }
}

}  // namespace gecd::route
