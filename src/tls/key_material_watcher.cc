#include "tls/key_material_watcher.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace gecd::tls {
namespace {

// What a log line says the set is: its certificate, or its CAs when it has none.
std::string Describe(const KeyMaterialFiles& files, const KeyMaterial& material) {
  if (files.cert_file.empty()) return absl::StrCat("CAs ", files.ca_file);
  return absl::StrCat("certificate ", files.cert_file, " (expires ", material.not_after, ")");
}

}  // namespace

KeyMaterialWatcher::KeyMaterialWatcher(KeyMaterialFiles files, Apply apply)
    : files_(std::move(files)), apply_(std::move(apply)) {}

absl::StatusOr<std::unique_ptr<KeyMaterialWatcher>> KeyMaterialWatcher::Start(
    KeyMaterialFiles files, std::chrono::milliseconds period, Apply apply) {
  const std::vector<std::string> paths = files.Paths();
  daemon::FilePoller::Reading reading = daemon::FilePoller::Read(paths);
  absl::StatusOr<KeyMaterial> material = CheckKeyMaterial(files, reading);
  if (!material.ok()) return material.status();
  if (absl::Status applied = apply(*material); !applied.ok()) return applied;
  spdlog::info("{}: {}", files.cert_file.empty() ? files.ca_key : files.cert_key,
               Describe(files, *material));
  std::unique_ptr<KeyMaterialWatcher> watcher(
      new KeyMaterialWatcher(std::move(files), std::move(apply)));
  KeyMaterialWatcher* self = watcher.get();
  watcher->poller_ = std::make_unique<daemon::FilePoller>(
      paths, std::move(reading), period,
      [self](const daemon::FilePoller::Reading& now) { self->OnChange(now); });
  return watcher;
}

void KeyMaterialWatcher::OnChange(const daemon::FilePoller::Reading& reading) {
  absl::StatusOr<KeyMaterial> material = CheckKeyMaterial(files_, reading);
  absl::Status status = material.status();
  if (material.ok()) status = apply_(*material);
  if (!status.ok()) {
    spdlog::error("{}; the certificate in use is kept", std::string(status.message()));
    return;
  }
  spdlog::info("{}: new {} for new connections",
               files_.cert_file.empty() ? files_.ca_key : files_.cert_key,
               Describe(files_, *material));
}

}  // namespace gecd::tls
