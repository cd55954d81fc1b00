#include "tls/checked_copy.h"

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

namespace gecd::tls {
namespace {

constexpr char kKey[] = "key.pem";
constexpr char kCertificate[] = "cert.pem";
constexpr char kCa[] = "ca.pem";

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

}  // namespace

absl::StatusOr<std::unique_ptr<CheckedCopy>> CheckedCopy::Create() {
  std::error_code ec;
  const std::string base =
      std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0
          ? "/dev/shm"
          : std::filesystem::temp_directory_path(ec).string();
  std::string pattern = absl::StrCat(base, "/gecd-tls-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) return Errno("cannot create a directory in", base);
  return std::unique_ptr<CheckedCopy>(new CheckedCopy(std::move(pattern)));
}

CheckedCopy::~CheckedCopy() {
  std::error_code ec;  // best effort: the process is going anyway
  std::filesystem::remove_all(dir_, ec);
}

std::string CheckedCopy::key_path() const { return absl::StrCat(dir_, "/current/", kKey); }
std::string CheckedCopy::certificate_path() const {
  return absl::StrCat(dir_, "/current/", kCertificate);
}
std::string CheckedCopy::ca_path() const { return absl::StrCat(dir_, "/current/", kCa); }

absl::Status CheckedCopy::Stage(const KeyMaterial& material) {
  MutexLock lock(&mu_);
  const int generation = ++generation_;
  stamp_ = std::max<std::time_t>(std::time(nullptr), stamp_ + 1);
  const std::string name = absl::StrCat("gen-", generation);
  const std::string dir = absl::StrCat(dir_, "/", name);
  if (mkdir(dir.c_str(), 0700) != 0) return Errno("cannot create", dir);
  const std::pair<const char*, const std::string*> files[] = {
      {kKey, &material.private_key},
      {kCertificate, &material.certificate_chain},
      {kCa, &material.ca}};
  for (const auto& [file, bytes] : files) {
    if (bytes->empty()) continue;
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
