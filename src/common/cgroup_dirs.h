#ifndef GECD_COMMON_CGROUP_DIRS_H_
#define GECD_COMMON_CGROUP_DIRS_H_

#include <string>
#include <string_view>
#include <vector>

// Where the limits that bind this process live: a container's memory and CPU limits are cgroup
// limits, set on its cgroup or on any ancestor of it (a parent's limit binds its children).
namespace gecd {

struct CgroupDir {
  std::string path;  // a directory under the cgroup filesystem
  bool v2 = false;   // cgroup v2 (unified) or the v1 controller's hierarchy
};

// The directories of the process's cgroups, its own first, then each ancestor up to the
// hierarchy's root: for cgroup v2 (the "0::/path" line of `proc_self_cgroup`, the text of
// /proc/self/cgroup) under `cgroup_root`, and for cgroup v1 the hierarchy whose controllers
// include `v1_controller` (e.g. "memory" or "cpu"), mounted at `cgroup_root`/<controllers>.
// With no v2 line, the v2 root itself (a container's namespace root may carry the limit).
std::vector<CgroupDir> CgroupDirs(const std::string& cgroup_root, std::string_view proc_self_cgroup,
                                  std::string_view v1_controller);

// The text of /proc/self/cgroup ("" when it cannot be read).
std::string ProcSelfCgroup();

// The file's contents without surrounding whitespace; "" when absent or unreadable.
std::string ReadCgroupFile(const std::string& path);

}  // namespace gecd

#endif  // GECD_COMMON_CGROUP_DIRS_H_
