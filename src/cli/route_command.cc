#ifdef GECD_HAVE_SERVER
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "common/logging.h"
#include "route/router.h"

namespace gecd::cli {

int RunRoute(const std::vector<std::string>& argv) {
  int exit_code = 0;
  std::optional<DaemonFlags> flags = ParseDaemonFlags(argv, "route", &exit_code);
  if (!flags.has_value()) return exit_code;
  const config::Config& cfg = flags->config;
  if (absl::Status s = SetUpLogging("route", cfg.logging.level, cfg.logging.format); !s.ok()) {
    std::fprintf(stderr, "gecd route: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return route::RunRouter(cfg);
}

}  // namespace gecd::cli
#endif
