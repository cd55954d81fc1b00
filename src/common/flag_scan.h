#ifndef GECD_COMMON_FLAG_SCAN_H_
#define GECD_COMMON_FLAG_SCAN_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

// The "--flag value" / "--flag=value" convention of gecd-load and the bench tools' command
// lines (the gecd subcommands use cli/args.h).
namespace gecd {

struct CommandLineFlag {
  std::string name;                         // "--target"
  std::optional<std::string> inline_value;  // what followed '=', if there was one
};

// args[i] split at its first '='.
CommandLineFlag SplitFlag(const std::string& arg);

// The flag's value: its inline value, else args[i + 1] (then i moves past it). An error naming
// the flag when there is neither.
absl::StatusOr<std::string> FlagValue(const CommandLineFlag& flag,
                                      const std::vector<std::string>& args, size_t& i);

}  // namespace gecd

#endif  // GECD_COMMON_FLAG_SCAN_H_
