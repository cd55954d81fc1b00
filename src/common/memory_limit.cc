#include "common/memory_limit.h"

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/cgroup_dirs.h"

namespace gecd {

MemoryLimit MemoryLimitFrom(uint64_t physical_bytes, const std::string& cgroup_root,
                            std::string_view proc_self_cgroup) {
  MemoryLimit limit{physical_bytes, "physical memory"};
  for (const CgroupDir& dir : CgroupDirs(cgroup_root, proc_self_cgroup, "memory")) {
    const std::string file =
        absl::StrCat(dir.path, dir.v2 ? "/memory.max" : "/memory.limit_in_bytes");
    // "max", absent, unreadable or not a number: no limit there.
    uint64_t bytes = 0;
    if (!absl::SimpleAtoi(ReadCgroupFile(file), &bytes)) continue;
    if (bytes > 0 && bytes < limit.bytes) limit = {bytes, absl::StrCat("cgroup ", file)};
  }
  return limit;
}

const MemoryLimit& ProcessMemoryLimit() {
  static const MemoryLimit limit = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_bytes = sysconf(_SC_PAGESIZE);
    const uint64_t physical = pages > 0 && page_bytes > 0
                                  ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes)
                                  : UINT64_MAX;
    return MemoryLimitFrom(physical, "/sys/fs/cgroup", ProcSelfCgroup());
  }();
  return limit;
}

std::string Megabytes(uint64_t bytes) { return absl::StrCat(bytes >> 20, " MB"); }

}  // namespace gecd
