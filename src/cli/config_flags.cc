#include "cli/config_flags.h"

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cli/args.h"
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

namespace {

absl::StatusOr<DaemonFlags> LoadDaemonFlags(const Args& args) {
  DaemonFlags f;
  // Absolute, because the daemon's children re-read it and the supervisor's cwd is theirs only
  // by luck.
  f.config_path =
      args.Has("config") ? std::filesystem::absolute(*args.Get("config")).string() : std::string();
  f.overrides = args.GetAll("set");
  ASSIGN_OR_RETURN(f.config, LoadConfigWithOverrides(f.config_path, f.overrides));
  return f;
}

}  // namespace

std::optional<DaemonFlags> ParseDaemonFlags(const std::vector<std::string>& argv,
                                            const char* command, int* exit_code) {
  const std::vector<FlagSpec> specs = {
      {"config", true, "gecd YAML config (default: built-in defaults)"},
      {"set", true, "override a config key, e.g. --set server.workers=2 (repeatable)"},
      {"help", false, "show this help"},
  };
  absl::StatusOr<Args> args = Args::Parse(argv, specs);
  if (args.ok() && args->Has("help")) {
    std::printf("usage: gecd %s [--config FILE] [--set KEY=VALUE]...\n\n%s", command,
                FlagHelp(specs).c_str());
    *exit_code = 0;
    return std::nullopt;
  }
  if (args.ok() && !args->positionals().empty()) {
    args = absl::InvalidArgumentError(absl::StrCat(command, " takes no positional arguments"));
  }
  absl::StatusOr<DaemonFlags> flags =
      args.ok() ? LoadDaemonFlags(*args) : absl::StatusOr<DaemonFlags>(args.status());
  if (!flags.ok()) {
    std::fprintf(stderr, "gecd %s: %s\n", command, std::string(flags.status().message()).c_str());
    *exit_code = 2;
    return std::nullopt;
  }
  return *std::move(flags);
}

}  // namespace gecd::cli
