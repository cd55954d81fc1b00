#include "tls/server_tls.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "spdlog/spdlog.h"

namespace gecd::tls {
namespace {

constexpr char kKey[] = "key.pem";
constexpr char kCertificate[] = "cert.pem";
constexpr char kClientCa[] = "ca.pem";

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat("tls: ", what, " ", path, ": ", std::strerror(errno)));
}

// Writes a file only its owner can read, with the given mtime.
absl::Status WritePrivateFile(const std::string& path, const std::string& bytes,
                              std::time_t mtime) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", path);
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const absl::Status status = Errno("cannot write", path);
      close(fd);
      return status;
    }
    written += static_cast<size_t>(n);
  }
  const timespec times[2] = {{mtime, 0}, {mtime, 0}};
  const bool stamped = futimens(fd, times) == 0;
  const absl::Status status = stamped ? absl::OkStatus() : Errno("cannot set the mtime of", path);
  close(fd);
  return status;
}

absl::StatusOr<std::string> MakePrivateDirectory() {
  std::error_code ec;
  const std::string base =
      std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0
          ? "/dev/shm"
          : std::filesystem::temp_directory_path(ec).string();
  std::string pattern = absl::StrCat(base, "/gecd-tls-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) return Errno("cannot create a directory in", base);
  return pattern;
}

}  // namespace

ServerTls::ServerTls(const config::TlsSection& tls, std::string dir)
    : tls_(tls), dir_(std::move(dir)) {}

absl::StatusOr<std::unique_ptr<ServerTls>> ServerTls::Create(const config::TlsSection& tls) {
  const std::vector<std::string> paths = KeyMaterialPaths(tls);
  daemon::FilePoller::Reading files = daemon::FilePoller::Read(paths);
  absl::StatusOr<KeyMaterial> material = CheckKeyMaterial(tls, files);
  if (!material.ok()) return material.status();
  absl::StatusOr<std::string> dir = MakePrivateDirectory();
  if (!dir.ok()) return dir.status();
  std::unique_ptr<ServerTls> server_tls(new ServerTls(tls, *std::move(dir)));
  {
    MutexLock lock(&server_tls->mu_);
    if (absl::Status staged = server_tls->Stage(*material); !staged.ok()) return staged;
  }
  const std::string current = absl::StrCat(server_tls->dir_, "/current/");
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      current + kKey, current + kCertificate, tls.client_ca_file.empty() ? "" : current + kClientCa,
      static_cast<unsigned int>(tls.refresh_s));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!tls.client_ca_file.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(tls.require_client_cert
                                      ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                      : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  server_tls->credentials_ = grpc::experimental::TlsServerCredentials(options);
  spdlog::info("tls: certificate {} (expires {}){}", tls.cert_file, material->not_after,
               tls.client_ca_file.empty()
                   ? ""
                   : absl::StrCat(", client certificates from ", tls.client_ca_file,
                                  tls.require_client_cert ? " required" : " verified if sent"));
  ServerTls* self = server_tls.get();
  server_tls->poller_ = std::make_unique<daemon::FilePoller>(
      paths, std::move(files), std::chrono::seconds(tls.refresh_s),
      [self](const daemon::FilePoller::Reading& now) { self->OnChange(now); });
  return server_tls;
}

ServerTls::~ServerTls() {
  poller_.reset();
  std::error_code ec;  // best effort: the process is going anyway
  std::filesystem::remove_all(dir_, ec);
}

void ServerTls::OnChange(const daemon::FilePoller::Reading& files) {
  absl::StatusOr<KeyMaterial> material = CheckKeyMaterial(tls_, files);
  if (!material.ok()) {
    spdlog::error("{}; the certificate in use is kept", std::string(material.status().message()));
    return;
  }
  MutexLock lock(&mu_);
  if (absl::Status staged = Stage(*material); !staged.ok()) {
    spdlog::error("{}; the certificate in use is kept", std::string(staged.message()));
    return;
  }
  spdlog::info("tls: new certificate {} (expires {}) for new connections", tls_.cert_file,
               material->not_after);
}

absl::Status ServerTls::Stage(const KeyMaterial& material) {
  const int generation = ++generation_;
  stamp_ = std::max<std::time_t>(std::time(nullptr), stamp_ + 1);
  const std::string name = absl::StrCat("gen-", generation);
  const std::string dir = absl::StrCat(dir_, "/", name);
  if (mkdir(dir.c_str(), 0700) != 0) return Errno("cannot create", dir);
  const std::pair<const char*, const std::string*> files[] = {
      {kKey, &material.private_key},
      {kCertificate, &material.certificate_chain},
      {kClientCa, &material.client_ca}};
  for (const auto& [file, bytes] : files) {
    if (file == kClientCa && tls_.client_ca_file.empty()) continue;
    RETURN_IF_ERROR(WritePrivateFile(absl::StrCat(dir, "/", file), *bytes, stamp_));
  }
  const std::string link = absl::StrCat(dir_, "/current.new");
  unlink(link.c_str());
  if (symlink(name.c_str(), link.c_str()) != 0) return Errno("cannot create", link);
  const std::string current = absl::StrCat(dir_, "/current");
  if (rename(link.c_str(), current.c_str()) != 0) return Errno("cannot replace", current);
  // Two generations back: gRPC may still be reading the one just replaced.
  std::error_code ec;
  std::filesystem::remove_all(absl::StrCat(dir_, "/gen-", generation - 2), ec);
  return absl::OkStatus();
}

}  // namespace gecd::tls
