#include "route/kube_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "route/kubernetes_source.h"
#include "testing/scoped_temp_dir.h"
#include "testing/test_paths.h"

namespace gecd::route {
namespace {

using ::testing::HasSubstr;

void WriteFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string ReadFixture(const std::string& name) {
  std::ifstream in(gecd::testing::FixturePath("k8s/" + name), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A kubeconfig as kubectl writes one, with two contexts; {USER} and {CLUSTER} are replaced.
constexpr char kKubeconfig[] = R"(apiVersion: v1
kind: Config
preferences: {}
current-context: dev
clusters:
- name: prod
  cluster:
    server: https://prod.example:6443
- name: dev
  cluster:
{CLUSTER}
contexts:
- name: prod
  context: {cluster: prod, user: admin}
- name: dev
  context:
    cluster: dev
    user: ci
    namespace: gec-dev
users:
- name: admin
  user: {token: admin-token}
- name: ci
  user:
{USER}
)";

class KubeconfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& cluster, const std::string& user) {
    const std::string path = dir_.path() + "/kube/config";
    WriteFile(path, absl::StrReplaceAll(kKubeconfig, {{"{CLUSTER}", cluster}, {"{USER}", user}}));
    return path;
  }
  absl::StatusOr<KubeApiConfig> Load(const std::string& cluster, const std::string& user) {
    return LoadKubeconfig(Write(cluster, user));
  }
  std::string Path() const { return dir_.path() + "/kube/config"; }

  gecd::testing::ScopedTempDir dir_;
};

TEST_F(KubeconfigTest, CurrentContextWithRelativeFiles) {
  WriteFile(dir_.path() + "/kube/certs/ca.crt", ReadFixture("ca.crt"));
  WriteFile(dir_.path() + "/kube/token", "abc\n");
  absl::StatusOr<KubeApiConfig> config =
      Load("    server: https://127.0.0.1:6443/\n    certificate-authority: certs/ca.crt",
           "    tokenFile: token");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://127.0.0.1:6443");
  EXPECT_EQ(config->ca_file, dir_.path() + "/kube/certs/ca.crt");
  EXPECT_EQ(config->token_file, dir_.path() + "/kube/token");
  EXPECT_EQ(config->namespace_, "gec-dev");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST_F(KubeconfigTest, DataFieldsAreDecoded) {
  const std::string ca = ReadFixture("ca.crt");
  const std::string cert = ReadFixture("client.crt");
  const std::string key = ReadFixture("client.key");
  absl::StatusOr<KubeApiConfig> config =
      Load(absl::StrCat("    server: https://k8s.example\n    certificate-authority-data: ",
                        absl::Base64Escape(ca)),
           absl::StrCat("    client-certificate-data: ", absl::Base64Escape(cert),
                        "\n    client-key-data: ", absl::Base64Escape(key)));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ca_pem, ca);
  EXPECT_EQ(config->client_cert_pem, cert);
  EXPECT_EQ(config->client_key_pem, key);
  EXPECT_TRUE(config->token.empty());
}

TEST_F(KubeconfigTest, TokenAndInsecure) {
  absl::StatusOr<KubeApiConfig> config = Load(
      "    server: https://k8s.example\n    insecure-skip-tls-verify: true", "    token: s3cret");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->token, "s3cret");
}

TEST_F(KubeconfigTest, ErrorsNameTheKeyThePathAndTheField) {
  const std::string ok_cluster = "    server: https://k8s.example";
  struct Case {
    std::string cluster, user, field;
  };
  const Case cases[] = {
      {"    insecure-skip-tls-verify: true", "    token: t",
       "clusters[dev].cluster.server: missing"},
      {"    server: k8s.example:6443", "    token: t",
       "clusters[dev].cluster.server: \"k8s.example:6443\" is not an https:// or http:// URL"},
      {ok_cluster + "\n    certificate-authority-data: '%%%not base64'", "    token: t",
       "clusters[dev].cluster.certificate-authority-data: not valid base64"},
      {ok_cluster + "\n    certificate-authority-data: " + absl::Base64Escape("plain text"),
       "    token: t", "clusters[dev].cluster.certificate-authority-data: not PEM"},
      {ok_cluster + "\n    certificate-authority: missing.crt", "    token: t",
       "clusters[dev].cluster.certificate-authority: cannot read " +
           Path().substr(0, Path().size() - 6) + "missing.crt"},
      {ok_cluster + "\n    insecure-skip-tls-verify: maybe", "    token: t",
       "clusters[dev].cluster.insecure-skip-tls-verify: not a boolean"},
      {ok_cluster, "    client-key-data: " + absl::Base64Escape(ReadFixture("client.key")),
       "users[ci].user.client-certificate: missing (a client certificate needs its key)"},
      {ok_cluster, "    client-certificate-data: '!!!'",
       "users[ci].user.client-certificate-data: not valid base64"},
      {ok_cluster, "    exec: {command: aws}", "users[ci].user.exec: not supported"},
      {ok_cluster, "    token: [a, b]", "users[ci].user.token: not a string"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<KubeApiConfig> config = Load(c.cluster, c.user);
    ASSERT_FALSE(config.ok()) << c.field;
    EXPECT_THAT(std::string(config.status().message()),
                HasSubstr(absl::StrCat("route.kubernetes.kubeconfig: ", Path(), ": ", c.field)));
  }
}

TEST_F(KubeconfigTest, UnknownContextClusterOrUser) {
  const std::string path = Path();
  WriteFile(path, "current-context: nope\ncontexts: []\n");
  EXPECT_THAT(
      std::string(LoadKubeconfig(path).status().message()),
      HasSubstr("route.kubernetes.kubeconfig: " + path + ": contexts: no entry named \"nope\""));
  WriteFile(path, "clusters: []\ncontexts: [{name: a, context: {cluster: gone}}]\n");
  EXPECT_THAT(std::string(LoadKubeconfig(path).status().message()),
              HasSubstr(": current-context: missing"));
  WriteFile(path,
            "current-context: a\nclusters: []\ncontexts: [{name: a, context: {cluster: gone}}]\n");
  EXPECT_THAT(std::string(LoadKubeconfig(path).status().message()),
              HasSubstr(": clusters: no entry named \"gone\""));
  WriteFile(path,
            "current-context: a\nclusters: [{name: c, cluster: {server: 'https://x'}}]\n"
            "contexts: [{name: a, context: {cluster: c, user: u}}]\nusers: {}\n");
  EXPECT_THAT(std::string(LoadKubeconfig(path).status().message()),
              HasSubstr(": users: not a list"));
}

TEST_F(KubeconfigTest, MalformedYamlAndMissingFile) {
  const std::string path = Path();
  WriteFile(path, "clusters: [\n  {name: a\n");
  absl::StatusOr<KubeApiConfig> config = LoadKubeconfig(path);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("route.kubernetes.kubeconfig: " + path + ": line "));
  WriteFile(path, "just a string");
  EXPECT_THAT(std::string(LoadKubeconfig(path).status().message()),
              HasSubstr(": (top level): not a map"));
  config = LoadKubeconfig(dir_.path() + "/absent");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("route.kubernetes.kubeconfig: cannot read " + dir_.path() + "/absent"));
}

TEST_F(KubeconfigTest, ResolvedNamespace) {
  const std::string path = Write("    server: https://k8s.example", "    token: t");
  config::KubernetesSection kube;
  kube.service = "gecd";
  kube.kubeconfig = path;
  absl::StatusOr<KubernetesSourceOptions> options = ResolveKubernetesOptions(kube, {});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->namespace_, "gec-dev");  // the context's
  EXPECT_EQ(options->service, "gecd");
  EXPECT_EQ(options->port, "grpc");
  EXPECT_EQ(options->token_refresh, absl::Seconds(60));
  kube.namespace_ = "other";
  EXPECT_EQ(ResolveKubernetesOptions(kube, {})->namespace_, "other");
  // A context without a namespace: "default", as kubectl.
  WriteFile(path,
            "current-context: a\nclusters: [{name: c, cluster: {server: 'https://x'}}]\n"
            "contexts: [{name: a, context: {cluster: c}}]\n");
  kube.namespace_ = "";
  EXPECT_EQ(ResolveKubernetesOptions(kube, {})->namespace_, "default");
}

class InClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.service_host = "10.96.0.1";
    env_.service_port = "443";
    env_.service_account_dir = dir_.path();
    WriteFile(dir_.path() + "/token", "eyJ.token\n");
    WriteFile(dir_.path() + "/ca.crt", ReadFixture("ca.crt"));
    WriteFile(dir_.path() + "/namespace", "gec\n");
  }
  gecd::testing::ScopedTempDir dir_;
  InClusterEnvironment env_;
};

TEST_F(InClusterTest, ServiceAccountFiles) {
  absl::StatusOr<KubeApiConfig> config = InClusterConfig(env_);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->token_file, dir_.path() + "/token");  // re-read, not copied
  EXPECT_TRUE(config->token.empty());
  EXPECT_EQ(config->ca_file, dir_.path() + "/ca.crt");
  EXPECT_EQ(config->namespace_, "gec");
}

TEST_F(InClusterTest, IPv6HostInBrackets) {
  env_.service_host = "fd00:10:96::1";
  EXPECT_EQ(InClusterConfig(env_)->server, "https://[fd00:10:96::1]:443");
}

TEST_F(InClusterTest, OutsideAClusterSaysToSetKubeconfig) {
  env_.service_host = "";
  absl::StatusOr<KubeApiConfig> config = InClusterConfig(env_);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("KUBERNETES_SERVICE_HOST is not set"));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("set route.kubernetes.kubeconfig"));
  env_.service_host = "10.96.0.1";
  env_.service_port = "https";
  EXPECT_THAT(std::string(InClusterConfig(env_).status().message()),
              HasSubstr("KUBERNETES_SERVICE_PORT: \"https\" is not a port number"));
}

TEST_F(InClusterTest, MissingTokenOrNamespace) {
  std::filesystem::remove(dir_.path() + "/token");
  EXPECT_THAT(std::string(InClusterConfig(env_).status().message()),
              HasSubstr("service-account file " + dir_.path() + "/token cannot be read"));
  WriteFile(dir_.path() + "/token", "t");
  std::filesystem::remove(dir_.path() + "/namespace");
  config::KubernetesSection kube;
  kube.service = "gecd";
  absl::StatusOr<KubernetesSourceOptions> options = ResolveKubernetesOptions(kube, env_);
  ASSERT_FALSE(options.ok());
  EXPECT_THAT(std::string(options.status().message()),
              HasSubstr("route.kubernetes.namespace: not set"));
  kube.namespace_ = "gec";
  EXPECT_EQ(ResolveKubernetesOptions(kube, env_)->namespace_, "gec");
}

}  // namespace
}  // namespace gecd::route
