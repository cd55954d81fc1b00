#ifndef GECD_COMMON_ARGS_H_
#define GECD_COMMON_ARGS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// The one command-line parser, of gecd's subcommands, gecd-load and the bench tools:
// `--name value`, `--name=value`, boolean `--name`, and positionals (everything after `--`
// too). Each program declares its flags, so a misspelt flag is an error that names it instead
// of being ignored. Repeated flags keep every value; Get gives the last, so the order of
// different flags never matters. Parsed Args are immutable; thread-compatible.
namespace gecd {

struct FlagSpec {
  std::string name;  // without the leading "--"
  bool takes_value;  // false: a boolean switch
  std::string help;
};

class Args {
 public:
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv,
                                    const std::vector<FlagSpec>& specs);

  bool Has(std::string_view name) const;
  // The last value given for `name`; GetAll has every one, in order (repeatable flags).
  std::optional<std::string> Get(std::string_view name) const;
  std::vector<std::string> GetAll(std::string_view name) const;
  absl::StatusOr<std::string> Required(std::string_view name) const;
  absl::StatusOr<int> GetInt(std::string_view name, int default_value) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  // InvalidArgument naming the first positional, for commands that take none.
  absl::Status NoPositionals() const;

 private:
  std::map<std::string, std::vector<std::string>, std::less<>> values_;
  std::vector<std::string> positionals_;
};

// Parse for a tool that takes no positionals (gecd-load, the bench tools): errors end in
// " (see --help)"; `-h` or a `help` switch among `specs` sets *help.
absl::StatusOr<Args> ParseToolArgs(const std::vector<std::string>& argv,
                                   const std::vector<FlagSpec>& specs, bool* help);

// "  --name VALUE   help" lines for a usage message.
std::string FlagHelp(const std::vector<FlagSpec>& specs);

}  // namespace gecd

#endif  // GECD_COMMON_ARGS_H_
