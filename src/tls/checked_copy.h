#ifndef GECD_TLS_CHECKED_COPY_H_
#define GECD_TLS_CHECKED_COPY_H_

#include <ctime>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "tls/key_material.h"

// A private copy of checked key material, for gRPC's FileWatcherCertificateProvider to watch.
// That provider re-reads files, but it serves whatever it finds (a key that is not the
// certificate's, a half-written file) and an unreadable file leaves it with no certificate at
// all; so it watches this copy, which is replaced only with sets that passed CheckKeyMaterial.
// The copy is a 0700 directory (in /dev/shm when there is one, so keys stay off disk) whose
// `current` symlink is swapped in one rename, each generation with a later mtime, so gRPC's
// read (key, then certificate, checked by mtime) never pairs files of two generations.
// Owns the directory (removed by the destructor). Thread-safe.
namespace gecd::tls {

class CheckedCopy {
 public:
  static absl::StatusOr<std::unique_ptr<CheckedCopy>> Create();
  ~CheckedCopy();
  CheckedCopy(const CheckedCopy&) = delete;
  CheckedCopy& operator=(const CheckedCopy&) = delete;

  // Writes `material` as the next generation and points `current` at it. Its empty parts (no
  // certificate, no CAs) are not written.
  absl::Status Stage(const KeyMaterial& material) ABSL_LOCKS_EXCLUDED(mu_);

  // Where the current generation's files are, for the provider.
  std::string key_path() const;
  std::string certificate_path() const;
  std::string ca_path() const;

 private:
  explicit CheckedCopy(std::string dir) : dir_(std::move(dir)) {}

  const std::string dir_;
  Mutex mu_;
  int generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::time_t stamp_ ABSL_GUARDED_BY(mu_) = 0;  // the last generation's mtime
};

}  // namespace gecd::tls

#endif  // GECD_TLS_CHECKED_COPY_H_
