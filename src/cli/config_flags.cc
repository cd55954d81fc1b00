#include "cli/config_flags.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cli/command_line.h"
#include "common/args.h"
#include "common/status_macros.h"

namespace gecd::cli {

absl::StatusOr<config::Config> LoadConfigFlags(const Args& args) {
  return config::LoadConfigWithOverrides(args.Get("config").value_or(""), args.GetAll("set"));
}

absl::StatusOr<DaemonFlags> LoadDaemonFlags(const Args& args) {
  DaemonFlags f;
  // Absolute, because the daemon's children re-read it and the supervisor's cwd is theirs only
  // by luck.
  f.config_path =
      args.Has("config") ? std::filesystem::absolute(*args.Get("config")).string() : std::string();
  f.overrides = args.GetAll("set");
  ASSIGN_OR_RETURN(f.config, config::LoadConfigWithOverrides(f.config_path, f.overrides));
  return f;
}

std::optional<DaemonFlags> ParseDaemonFlags(const std::vector<std::string>& argv,
                                            const char* command, int* exit_code) {
  const CommandLine line = {
      .name = command,
      .flags = {{"config", true, "gecd YAML config (default: built-in defaults)"},
                {"set", true, "override a config key, e.g. --set server.workers=2 (repeatable)"}},
      .usage = absl::StrCat("usage: gecd ", command, " [--config FILE] [--set KEY=VALUE]...\n\n"),
  };
  return ParseCommandLine(
      line, argv,
      [command](const Args& args) -> absl::StatusOr<DaemonFlags> {
        if (!args.positionals().empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat(command, " takes no positional arguments"));
        }
        return LoadDaemonFlags(args);
      },
      exit_code);
}

}  // namespace gecd::cli
