#ifndef GECD_DAEMON_FILE_POLLER_H_
#define GECD_DAEMON_FILE_POLLER_H_

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

// Watches files that operators replace while the daemon runs (certificates that cert-manager
// or a Kubernetes secret rotates, the tokens file): reads them every `period` on a thread of
// its own and calls `changed` with the new reading whenever any file's bytes (or the error
// reading it) differ from the last reading. Polling, not inotify: a Kubernetes secret volume
// swaps a symlink to a new directory, which watches on the files themselves never see.
// Owns the thread; the destructor joins it. `changed` runs on that thread.
namespace gecd::daemon {

class FilePoller {
 public:
  // One entry per path: its bytes, or why it could not be read (naming the path).
  using Reading = std::vector<absl::StatusOr<std::string>>;
  static Reading Read(const std::vector<std::string>& paths);

  // `initial` is the reading the owner started from (so an unchanged file calls nothing).
  FilePoller(std::vector<std::string> paths, Reading initial, std::chrono::milliseconds period,
             std::function<void(const Reading&)> changed);
  ~FilePoller();
  FilePoller(const FilePoller&) = delete;
  FilePoller& operator=(const FilePoller&) = delete;

 private:
  void Loop(Reading last) ABSL_LOCKS_EXCLUDED(mu_);

  const std::vector<std::string> paths_;
  const std::chrono::milliseconds period_;
  const std::function<void(const Reading&)> changed_;
  Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_FILE_POLLER_H_
