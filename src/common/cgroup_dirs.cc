#include "common/cgroup_dirs.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace gecd {
namespace {

// `base` + `path` and each ancestor of `path` (e.g. "/a/b", "/a", "") under it.
void AddWithAncestors(const std::string& base, std::string path, bool v2,
                      std::vector<CgroupDir>* dirs) {
  for (;;) {
    while (!path.empty() && path.back() == '/') path.pop_back();
    dirs->push_back({absl::StrCat(base, path), v2});
    if (path.empty()) return;
    path.resize(path.rfind('/'));
  }
}

}  // namespace

std::vector<CgroupDir> CgroupDirs(const std::string& cgroup_root, std::string_view proc_self_cgroup,
                                  std::string_view v1_controller) {
  std::vector<CgroupDir> dirs;
  bool v2_seen = false;
  const std::string controller =
      absl::StrCat(",", absl::string_view(v1_controller.data(), v1_controller.size()), ",");
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(proc_self_cgroup.data(), proc_self_cgroup.size()), '\n',
                      absl::SkipEmpty())) {
    // "0::/path" (v2) or "4:memory:/path", "3:cpu,cpuacct:/path" (v1).
    const std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3 || parts[2].empty() || parts[2][0] != '/') continue;
    if (parts[0] == "0" && parts[1].empty()) {
      v2_seen = true;
      AddWithAncestors(cgroup_root, std::string(parts[2]), true, &dirs);
    } else if (absl::StrContains(absl::StrCat(",", parts[1], ","), controller)) {
      AddWithAncestors(absl::StrCat(cgroup_root, "/", parts[1]), std::string(parts[2]), false,
                       &dirs);
    }
  }
  if (!v2_seen) dirs.push_back({cgroup_root, true});
  return dirs;
}

std::string ProcSelfCgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  if (in) text << in.rdbuf();
  return text.str();
}

std::string ReadCgroupFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(text.str()));
}

}  // namespace gecd
