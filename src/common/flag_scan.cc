#include "common/flag_scan.h"

#include "absl/strings/str_cat.h"

namespace gecd {

CommandLineFlag SplitFlag(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos) return {arg, std::nullopt};
  return {arg.substr(0, eq), arg.substr(eq + 1)};
}

absl::StatusOr<std::string> FlagValue(const CommandLineFlag& flag,
                                      const std::vector<std::string>& args, size_t& i) {
  if (flag.inline_value.has_value()) return *flag.inline_value;
  if (i + 1 < args.size()) return args[++i];
  return absl::InvalidArgumentError(absl::StrCat(flag.name, " needs a value (see --help)"));
}

}  // namespace gecd
