#include "daemon/file_poller.h"

#include <utility>

#include "common/mapped_file.h"

namespace gecd::daemon {
namespace {

bool Same(const FilePoller::Reading& a, const FilePoller::Reading& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].ok() != b[i].ok()) return false;
    if (a[i].ok() ? *a[i] != *b[i] : a[i].status() != b[i].status()) return false;
  }
  return true;
}

}  // namespace

FilePoller::Reading FilePoller::Read(const std::vector<std::string>& paths) {
  Reading reading;
  reading.reserve(paths.size());
  for (const std::string& path : paths) reading.push_back(ReadFileToString(path));
  return reading;
}

FilePoller::FilePoller(std::vector<std::string> paths, Reading initial,
                       std::chrono::milliseconds period,
                       std::function<void(const Reading&)> changed)
    : paths_(std::move(paths)), period_(period), changed_(std::move(changed)) {
  thread_ = std::thread([this, last = std::move(initial)]() mutable { Loop(std::move(last)); });
}

FilePoller::~FilePoller() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void FilePoller::Loop(Reading last) {
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(&stopping_, period_)) return;
    }
    // Read and report without the lock: the destructor must not wait behind a slow callback
    // for longer than that one callback.
    Reading now = Read(paths_);
    if (Same(now, last)) continue;
    changed_(now);
    last = std::move(now);
  }
}

}  // namespace gecd::daemon
