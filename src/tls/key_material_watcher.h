#ifndef GECD_TLS_KEY_MATERIAL_WATCHER_H_
#define GECD_TLS_KEY_MATERIAL_WATCHER_H_

#include <chrono>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "daemon/file_poller.h"
#include "tls/key_material.h"

// Follows the files of one TLS setting as they rotate (cert-manager, a Kubernetes secret):
// reads and checks them at start, then every `period`, and hands each checked set to `apply`
// (which puts it in use for new connections). A set that fails the checks, or that `apply`
// refuses, is logged as "<key> <path>: <reason>; the certificate in use is kept" and the set in
// use stays. The one rotation policy behind every TLS user: gRPC's credentials (ServerTls,
// ChannelTls) and the router's OpenSSL contexts (ListenerTls, UpstreamTls).
// Owns the FilePoller. `apply` runs on the caller of Start, then on the poller's thread, never
// two at once; the destructor returns once no `apply` runs or will.
namespace gecd::tls {

class KeyMaterialWatcher {
 public:
  using Apply = std::function<absl::Status(const KeyMaterial&)>;

  // Fails, naming the key, the file and the reason, when a file is bad at start (or `apply`
  // fails on it).
  static absl::StatusOr<std::unique_ptr<KeyMaterialWatcher>> Start(KeyMaterialFiles files,
                                                                   std::chrono::milliseconds period,
                                                                   Apply apply);
  ~KeyMaterialWatcher() = default;
  KeyMaterialWatcher(const KeyMaterialWatcher&) = delete;
  KeyMaterialWatcher& operator=(const KeyMaterialWatcher&) = delete;

 private:
  KeyMaterialWatcher(KeyMaterialFiles files, Apply apply);
  void OnChange(const daemon::FilePoller::Reading& reading);

  const KeyMaterialFiles files_;
  const Apply apply_;
  std::unique_ptr<daemon::FilePoller> poller_;  // last: stops before the rest goes
};

}  // namespace gecd::tls

#endif  // GECD_TLS_KEY_MATERIAL_WATCHER_H_
