#include "common/progress_bar.h"

#include <unistd.h>

#include <algorithm>

namespace gecd {
namespace {

constexpr int kWidth = 30;

}  // namespace

ProgressBar::ProgressBar(std::string label, size_t total, std::FILE* out)
    : label_(std::move(label)), total_(total), out_(out), tty_(isatty(fileno(out)) != 0) {
  MutexLock lock(&mu_);
  DrawLocked();
}

ProgressBar::~ProgressBar() {
  MutexLock lock(&mu_);
  if (tty_) std::fputc('\n', out_);
  std::fflush(out_);
}

void ProgressBar::Advance(size_t n, const std::string& note) {
  MutexLock lock(&mu_);
  done_ = std::min(total_, done_ + n);
  note_ = note;
  DrawLocked();
}

void ProgressBar::DrawLocked() {
  const double fraction = total_ == 0 ? 1.0 : static_cast<double>(done_) / total_;
  if (!tty_) {
    const int step = static_cast<int>(fraction * 10);
    if (step == last_drawn_step_) return;
    last_drawn_step_ = step;
    std::fprintf(out_, "%s: %zu/%zu (%d%%)\n", label_.c_str(), done_, total_, step * 10);
    return;
  }
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(filled, '#');
  bar.resize(kWidth, ' ');
  // \x1b[K clears what a longer previous note left behind.
  std::fprintf(out_, "\r%s [%s] %zu/%zu %s\x1b[K", label_.c_str(), bar.c_str(), done_, total_,
               note_.c_str());
  std::fflush(out_);
}

}  // namespace gecd
