#ifndef GECD_CLI_CONFIG_FLAGS_H_
#define GECD_CLI_CONFIG_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"

// The config a command runs with: its --config file and its --set KEY=VALUE overrides, which
// `gecd serve` also hands to the processes it starts.
namespace gecd::cli {

// The file at `path` ("" for the built-in defaults) with `overrides` ("KEY=VALUE" each)
// applied in order. InvalidArgument names an override without '=' or an unknown key.
absl::StatusOr<config::Config> LoadConfigWithOverrides(const std::string& path,
                                                       const std::vector<std::string>& overrides);

}  // namespace gecd::cli

#endif  // GECD_CLI_CONFIG_FLAGS_H_
