#ifdef GECD_HAVE_SERVER
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "common/logging.h"
#include "common/startup_phases.h"
#include "config/config.h"
#include "daemon/process_title.h"
#include "supervisor/roles.h"

namespace gecd::cli {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

absl::Status SetUpRoleLogging(std::string_view role, const config::Config& cfg) {
  return SetUpLogging(role, cfg.logging.level, cfg.logging.format);
}

}  // namespace

int RunServe(const std::vector<std::string>& argv) {
  int exit_code = 0;
  std::optional<DaemonFlags> flags = ParseDaemonFlags(argv, "serve", &exit_code);
  if (!flags.has_value()) return exit_code;
  ProcessStartup().Mark("config");
  if (absl::Status s = SetUpRoleLogging("supervisor", flags->config); !s.ok()) {
    std::fprintf(stderr, "gecd serve: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return supervisor::RunSupervisor(flags->config, flags->config_path,
                                   absl::StrJoin(flags->overrides, "\n"));
}

int RunChildRole(const std::string& role) {
  const std::vector<std::string> overrides =
      absl::StrSplit(EnvOrEmpty(supervisor::kOverridesEnv), '\n', absl::SkipEmpty());
  absl::StatusOr<config::Config> cfg =
      config::LoadConfigWithOverrides(EnvOrEmpty(supervisor::kConfigEnv), overrides);
  ProcessStartup().Mark("config");
  const std::string shm = EnvOrEmpty(supervisor::kShmEnv);
  int worker = -1;
  absl::Status status = cfg.status();
  if (status.ok() && role == "worker" &&
      !absl::SimpleAtoi(EnvOrEmpty(supervisor::kWorkerIndexEnv), &worker)) {
    status =
        absl::InvalidArgumentError(absl::StrCat(supervisor::kWorkerIndexEnv, " is not a number"));
  } else if (status.ok() && role != "worker" && role != "engine") {
    status =
        absl::InvalidArgumentError(absl::StrCat("unknown ", supervisor::kRoleEnv, " '", role, "'"));
  }
  const std::string name = role == "worker" ? absl::StrCat("worker ", worker) : role;
  if (status.ok()) status = SetUpRoleLogging(name, *cfg);
  if (!status.ok()) {
    std::fprintf(stderr, "gecd %s: %s\n", name.c_str(), std::string(status.message()).c_str());
    return 2;
  }
  daemon::SetProcessTitle(absl::StrCat("gecd: ", name));
  return role == "engine" ? engine_host::RunEngineProcess(*cfg, shm)
                          : worker::RunWorkerProcess(*cfg, shm, worker);
}

}  // namespace gecd::cli
#endif
