#include "common/memory_limit.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace gecd {
namespace {

// The file's number, or 0 when it is absent, unreadable, "max" or not a number.
uint64_t ReadLimitFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return 0;
  std::stringstream text;
  text << in.rdbuf();
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text.str()), &value)) return 0;
  return value;
}

// Lowers `limit` to the smallest `file` of the cgroup `path` (e.g. "/a/b") and its ancestors
// under `dir`: a parent's limit binds its children too.
void ApplyCgroupLimits(const std::string& dir, std::string path, const std::string& file,
                       MemoryLimit* limit) {
  for (;;) {
    while (!path.empty() && path.back() == '/') path.pop_back();
    const std::string candidate = absl::StrCat(dir, path, "/", file);
    const uint64_t bytes = ReadLimitFile(candidate);
    if (bytes > 0 && bytes < limit->bytes) *limit = {bytes, absl::StrCat("cgroup ", candidate)};
    if (path.empty()) return;
    path.resize(path.rfind('/'));
  }
}

}  // namespace

MemoryLimit MemoryLimitFrom(uint64_t physical_bytes, const std::string& cgroup_root,
                            std::string_view proc_self_cgroup) {
  MemoryLimit limit{physical_bytes, "physical memory"};
  bool v2_seen = false;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(proc_self_cgroup.data(), proc_self_cgroup.size()), '\n',
                      absl::SkipEmpty())) {
    // "0::/path" (v2) or "4:memory:/path" (v1).
    const std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3 || parts[2].empty() || parts[2][0] != '/') continue;
    if (parts[0] == "0" && parts[1].empty()) {
      v2_seen = true;
      ApplyCgroupLimits(cgroup_root, std::string(parts[2]), "memory.max", &limit);
    } else if (absl::StrContains(absl::StrCat(",", parts[1], ","), ",memory,")) {
      ApplyCgroupLimits(absl::StrCat(cgroup_root, "/memory"), std::string(parts[2]),
                        "memory.limit_in_bytes", &limit);
    }
  }
  // No /proc/self/cgroup line to follow: the namespace's root may still carry the limit.
  if (!v2_seen) ApplyCgroupLimits(cgroup_root, "", "memory.max", &limit);
  return limit;
}

const MemoryLimit& ProcessMemoryLimit() {
  static const MemoryLimit limit = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_bytes = sysconf(_SC_PAGESIZE);
    const uint64_t physical = pages > 0 && page_bytes > 0
                                  ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes)
                                  : UINT64_MAX;
    std::ifstream in("/proc/self/cgroup");
    std::stringstream text;
    if (in) text << in.rdbuf();
    return MemoryLimitFrom(physical, "/sys/fs/cgroup", text.str());
  }();
  return limit;
}

std::string Megabytes(uint64_t bytes) { return absl::StrCat(bytes >> 20, " MB"); }

}  // namespace gecd
