#include "common/cpu_limit.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cgroup_dirs.h"

namespace gecd {
namespace {

// CPUs granted by a quota of `quota` per `period` (the same unit); 0: none or unreadable.
double QuotaCpus(absl::string_view quota, absl::string_view period) {
  double q = 0, p = 0;
  if (!absl::SimpleAtod(quota, &q) || !absl::SimpleAtod(period, &p)) return 0;
  return q > 0 && p > 0 ? q / p : 0;
}

}  // namespace

CpuLimit CpuLimitFrom(int affinity_cpus, const std::string& cgroup_root,
                      std::string_view proc_self_cgroup) {
  CpuLimit limit{static_cast<double>(std::max(1, affinity_cpus)), "affinity"};
  for (const CgroupDir& dir : CgroupDirs(cgroup_root, proc_self_cgroup, "cpu")) {
    double cpus = 0;
    std::string file;
    if (dir.v2) {
      file = absl::StrCat(dir.path, "/cpu.max");
      const std::vector<std::string> fields =
          absl::StrSplit(ReadCgroupFile(file), ' ', absl::SkipEmpty());
      if (fields.size() == 2) cpus = QuotaCpus(fields[0], fields[1]);  // "max 100000": none
    } else {
      file = absl::StrCat(dir.path, "/cpu.cfs_quota_us");
      cpus = QuotaCpus(ReadCgroupFile(file),
                       ReadCgroupFile(absl::StrCat(dir.path, "/cpu.cfs_period_us")));
    }
    if (cpus > 0 && cpus < limit.cpus) limit = {cpus, absl::StrCat("cgroup ", file)};
  }
  return limit;
}

const CpuLimit& ProcessCpuLimit() {
  static const CpuLimit limit = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    const int affinity = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    return CpuLimitFrom(affinity, "/sys/fs/cgroup", ProcSelfCgroup());
  }();
  return limit;
}

int ComputeThreads(const CpuLimit& limit) {
  // A hair under a whole CPU still counts as one (a quota of 199999/100000 is meant as 2).
  return std::max(1, static_cast<int>(std::floor(limit.cpus + 1e-3)));
}

int DefaultWorkers(int cpus, bool engine_on_cpus) {
  return std::max(1, engine_on_cpus ? cpus / 4 : cpus);
}

}  // namespace gecd
