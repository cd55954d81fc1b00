#ifndef GECD_CLI_CONFIG_FLAGS_H_
#define GECD_CLI_CONFIG_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/args.h"
#include "config/config.h"

// The config a command runs with: its --config file and its --set KEY=VALUE overrides, which
// `gecd serve` also hands to the processes it starts.
namespace gecd::cli {

// The config of a command's --config FILE (as given; none: the built-in defaults) and its
// --set KEY=VALUE flags.
absl::StatusOr<config::Config> LoadConfigFlags(const Args& args);

// What `gecd serve` and `gecd route` take: [--config FILE] [--set KEY=VALUE]... [--help].
struct DaemonFlags {
  std::string config_path;  // absolute ("" for the built-in defaults)
  std::vector<std::string> overrides;
  config::Config config;  // loaded, overrides applied, validated
};

// --config and --set for a daemon (or `gecd tune`, which starts daemons): the path made
// absolute, since the processes it starts read the file again from their own working directory.
absl::StatusOr<DaemonFlags> LoadDaemonFlags(const Args& args);

// Parses `argv` for `gecd <command>`. nullopt when the command should end now with
// `*exit_code`: 0 after printing the help, 2 after printing the error to stderr.
std::optional<DaemonFlags> ParseDaemonFlags(const std::vector<std::string>& argv,
                                            const char* command, int* exit_code);

}  // namespace gecd::cli

#endif  // GECD_CLI_CONFIG_FLAGS_H_
