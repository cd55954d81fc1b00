#ifdef GECD_HAVE_SERVER
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "common/logging.h"
#include "config/config.h"
#include "server/process_title.h"
#include "server/roles.h"

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
  const std::vector<FlagSpec> specs = {
      {"config", true, "gecd YAML config (default: built-in defaults)"},
      {"set", true, "override a config key, e.g. --set server.workers=2 (repeatable)"},
      {"help", false, "show this help"},
  };
  absl::StatusOr<Args> args = Args::Parse(argv, specs);
  if (args.ok() && args->Has("help")) {
    std::printf("usage: gecd serve [--config FILE] [--set KEY=VALUE]...\n\n%s",
                FlagHelp(specs).c_str());
    return 0;
  }
  if (args.ok() && !args->positionals().empty()) {
    args = absl::InvalidArgumentError("serve takes no positional arguments");
  }
  if (!args.ok()) {
    std::fprintf(stderr, "gecd serve: %s\n", std::string(args.status().message()).c_str());
    return 2;
  }
  // Absolute, because the children re-read it and the supervisor's cwd is theirs only by luck.
  const std::string path = args->Has("config")
                               ? std::filesystem::absolute(*args->Get("config")).string()
                               : std::string();
  const std::vector<std::string> overrides = args->GetAll("set");
  absl::StatusOr<config::Config> cfg = LoadConfigWithOverrides(path, overrides);
  absl::Status status = cfg.ok() ? SetUpRoleLogging("supervisor", *cfg) : cfg.status();
  if (!status.ok()) {
    std::fprintf(stderr, "gecd serve: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  return server::RunSupervisor(*cfg, path, absl::StrJoin(overrides, "\n"));
}

int RunChildRole(const std::string& role) {
  const std::vector<std::string> overrides =
      absl::StrSplit(EnvOrEmpty(server::kOverridesEnv), '\n', absl::SkipEmpty());
  absl::StatusOr<config::Config> cfg =
      LoadConfigWithOverrides(EnvOrEmpty(server::kConfigEnv), overrides);
  const std::string shm = EnvOrEmpty(server::kShmEnv);
  int worker = -1;
  absl::Status status = cfg.status();
  if (status.ok() && role == "worker" &&
      !absl::SimpleAtoi(EnvOrEmpty(server::kWorkerIndexEnv), &worker)) {
    status = absl::InvalidArgumentError(absl::StrCat(server::kWorkerIndexEnv, " is not a number"));
  } else if (status.ok() && role != "worker" && role != "engine") {
    status =
        absl::InvalidArgumentError(absl::StrCat("unknown ", server::kRoleEnv, " '", role, "'"));
  }
  const std::string name = role == "worker" ? absl::StrCat("worker ", worker) : role;
  if (status.ok()) status = SetUpRoleLogging(name, *cfg);
  if (!status.ok()) {
    std::fprintf(stderr, "gecd %s: %s\n", name.c_str(), std::string(status.message()).c_str());
    return 2;
  }
  server::SetProcessTitle(absl::StrCat("gecd: ", name));
  return role == "engine" ? server::RunEngineProcess(*cfg, shm)
                          : server::RunWorkerProcess(*cfg, shm, worker);
}

}  // namespace gecd::cli
#endif
