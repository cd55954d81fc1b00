#ifndef GECD_ROUTE_KUBE_CONFIG_H_
#define GECD_ROUTE_KUBE_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// Where the Kubernetes API server is and how to authenticate to it: in-cluster configuration
// (the pod's service account) or a kubeconfig file (outside the cluster).
namespace gecd::route {

// The service-account directory Kubernetes mounts into every pod (token, ca.crt, namespace).
inline constexpr absl::string_view kServiceAccountDir =
    "/var/run/secrets/kubernetes.io/serviceaccount";

// One API server connection, resolved. A certificate or key is given as a file or as PEM
// bytes (a kubeconfig's *-data fields), never both.
struct KubeApiConfig {
  std::string server;   // "https://host:port[/prefix]", no trailing '/'
  std::string ca_file;  // the server's CA; both "" = the system's CAs
  std::string ca_pem;
  bool insecure_skip_tls_verify = false;
  std::string token;       // a fixed bearer token
  std::string token_file;  // a token re-read periodically and on a 401 (bound tokens expire)
  std::string client_cert_file;
  std::string client_cert_pem;
  std::string client_key_file;
  std::string client_key_pem;
  std::string namespace_;  // the pod's (in-cluster) or the current context's; "" = unknown
};

// What in-cluster configuration reads: in a pod, the environment Kubernetes sets and the
// service-account directory it mounts (FromProcess); tests make their own.
struct InClusterEnvironment {
  std::string service_host;  // KUBERNETES_SERVICE_HOST; "" = unset
  std::string service_port;  // KUBERNETES_SERVICE_PORT
  std::string service_account_dir = std::string(kServiceAccountDir);
  static InClusterEnvironment FromProcess();
};

// In-cluster: https://HOST:PORT (an IPv6 HOST in brackets), the service account's token (as a
// token file, re-read) and ca.crt, and its namespace file when it exists. Errors say what is
// missing and that route.kubernetes.kubeconfig is the way outside a cluster.
absl::StatusOr<KubeApiConfig> InClusterConfig(const InClusterEnvironment& env);

// A kubeconfig file: its current-context's cluster (server, certificate-authority(-data),
// insecure-skip-tls-verify), user (token, tokenFile, client-certificate(-data),
// client-key(-data)) and namespace. Relative file names are relative to the kubeconfig's
// folder, as kubectl reads them. Errors name route.kubernetes.kubeconfig, the path and the
// field (e.g. "users[ci].user.client-key-data: not valid base64").
absl::StatusOr<KubeApiConfig> LoadKubeconfig(const std::string& path);

}  // namespace gecd::route

#endif  // GECD_ROUTE_KUBE_CONFIG_H_
