#include "cli/config_flags.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gecd::cli {

absl::StatusOr<config::Config> LoadConfigWithOverrides(const std::string& path,
                                                       const std::vector<std::string>& overrides) {
  config::Config cfg;
  if (!path.empty()) {
    ASSIGN_OR_RETURN(cfg, config::LoadConfigFile(path));
  }
  for (const std::string& kv : overrides) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--set wants KEY=VALUE, got '", kv, "'"));
    }
    RETURN_IF_ERROR(config::ApplyOverride(cfg, kv.substr(0, eq), kv.substr(eq + 1)));
  }
  RETURN_IF_ERROR(config::ValidateConfig(cfg));
  return cfg;
}

}  // namespace gecd::cli
