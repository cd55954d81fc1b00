#ifndef GECD_COMMON_PROGRESS_BAR_H_
#define GECD_COMMON_PROGRESS_BAR_H_

#include <cstddef>
#include <cstdio>
#include <string>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace gecd {

// A one-line progress report for long CLI jobs ("quantize [#####     ] 12/40 gate_proj"). On a
// terminal it redraws in place whenever the bar or the note changes; into a file or pipe it
// writes a line per 10% so logs stay short. Safe to advance from several threads. The line is
// finished when the bar is destroyed.
class ProgressBar {
 public:
  ProgressBar(std::string label, size_t total, std::FILE* out = stderr);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Adds `n` finished items; `note` (e.g. the item's name) is shown after the count.
  void Advance(size_t n = 1, const std::string& note = "") ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void DrawLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  const std::string label_;
  const size_t total_;
  std::FILE* const out_;
  const bool tty_;
  size_t done_ ABSL_GUARDED_BY(mu_) = 0;
  std::string note_ ABSL_GUARDED_BY(mu_);
  int last_drawn_step_ ABSL_GUARDED_BY(mu_) = -1;  // the 10% step last written to a pipe
};

}  // namespace gecd

#endif  // GECD_COMMON_PROGRESS_BAR_H_
