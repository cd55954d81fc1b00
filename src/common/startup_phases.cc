#include "common/startup_phases.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"

namespace gecd {
namespace {

using std::chrono::microseconds;

int64_t Milliseconds(microseconds us) { return (us.count() + 500) / 1000; }

std::string Timing(microseconds wall, microseconds cpu) {
  return absl::StrCat(Milliseconds(wall), " ms (", Milliseconds(cpu), " ms CPU)");
}

}  // namespace

StartupPhases::StartupPhases(std::optional<microseconds> since_exec, microseconds cpu_since_exec,
                             Clock::time_point start)
    : since_exec_(since_exec),
      cpu_since_exec_(cpu_since_exec),
      start_(start),
      last_(start),
      cpu_start_(ThreadCpuTime()),
      cpu_last_(cpu_start_) {
  if (since_exec_) phases_.push_back({"exec→main", *since_exec_, cpu_since_exec_});
}

void StartupPhases::Mark(std::string_view phase) { Mark(phase, Clock::now(), ThreadCpuTime()); }

void StartupPhases::Mark(std::string_view phase, Clock::time_point now, microseconds cpu_now) {
  const microseconds took =
      std::max(microseconds(0), std::chrono::duration_cast<microseconds>(now - last_));
  const microseconds cpu = std::max(microseconds(0), cpu_now - cpu_last_);
  last_ = std::max(last_, now);
  cpu_last_ = std::max(cpu_last_, cpu_now);
  auto same =
      std::find_if(phases_.begin(), phases_.end(), [&](const Phase& p) { return p.name == phase; });
  if (same != phases_.end()) {
    same->took += took;
    same->cpu += cpu;
  } else {
    phases_.push_back({std::string(phase), took, cpu});
  }
}

microseconds StartupPhases::Total() const {
  return since_exec_.value_or(microseconds(0)) +
         std::chrono::duration_cast<microseconds>(last_ - start_);
}

std::string StartupPhases::Summary() const {
  std::string out;
  for (const Phase& p : phases_) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", p.name, " ", Timing(p.took, p.cpu));
  }
  absl::StrAppend(
      &out, out.empty() ? "" : "; ",
      Timing(Total(), (since_exec_ ? cpu_since_exec_ : microseconds(0)) + (cpu_last_ - cpu_start_)),
      since_exec_ ? " since exec" : " since start");
  return out;
}

std::optional<microseconds> TimeSinceExec() {
  // Field 22, starttime, in clock ticks since boot; the fields after the command name (which
  // may hold spaces and parentheses) start after its last ')'.
  const absl::StatusOr<std::string> stat = ReadFileToString("/proc/self/stat");
  const size_t paren = stat.ok() ? stat->rfind(')') : std::string::npos;
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(stat->substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  uint64_t start_ticks = 0;
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  timespec now = {};
  if (!fields || !absl::SimpleAtoi(field, &start_ticks) || ticks_per_second <= 0 ||
      clock_gettime(CLOCK_BOOTTIME, &now) != 0) {
    return std::nullopt;
  }
  const int64_t now_us = int64_t{now.tv_sec} * 1'000'000 + now.tv_nsec / 1000;
  const int64_t start_us = static_cast<int64_t>(start_ticks) * 1'000'000 / ticks_per_second;
  return microseconds(std::max<int64_t>(0, now_us - start_us));
}

microseconds ThreadCpuTime() {
  timespec now = {};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) != 0) return microseconds(0);
  return microseconds(int64_t{now.tv_sec} * 1'000'000 + now.tv_nsec / 1000);
}

StartupPhases& ProcessStartup() {
  // Before main only the main thread ran our code (library constructors run on it), so its
  // CPU time so far is what exec→main cost.
  static StartupPhases* phases = new StartupPhases(TimeSinceExec(), ThreadCpuTime());
  return *phases;
}

}  // namespace gecd
