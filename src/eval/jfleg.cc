#include "eval/jfleg.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"

namespace gecd::eval {

absl::StatusOr<JflegSet> LoadJfleg(const std::string& dir, const std::string& split, int limit) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("--jfleg ", dir, ": no such directory"));
  }
  JflegSet set;
  set.dir = dir;
  set.split = split;
  const std::string base = (std::filesystem::path(dir) / split).string();
  const std::string src_path = base + ".src";
  ASSIGN_OR_RETURN(set.sources, ReadLines(src_path));
  for (int k = 0;; ++k) {
    const std::string ref_path = absl::StrCat(base, ".ref", k);
    if (!std::filesystem::exists(ref_path, ec)) {
      if (k == 0)
        return absl::NotFoundError(absl::StrCat(ref_path, ": no such file (no references)"));
      break;
    }
    ASSIGN_OR_RETURN(std::vector<std::string> refs, ReadLines(ref_path));
    if (refs.size() != set.sources.size()) {
      return absl::InvalidArgumentError(absl::StrCat(ref_path, " has ", refs.size(), " lines but ",
                                                     src_path, " has ", set.sources.size()));
    }
    set.references.push_back(std::move(refs));
  }
  if (limit > 0 && static_cast<size_t>(limit) < set.sources.size()) {
    set.sources.resize(limit);
    for (auto& refs : set.references) refs.resize(limit);
  }
  return set;
}

}  // namespace gecd::eval
