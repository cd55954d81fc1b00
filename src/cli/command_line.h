#ifndef GECD_CLI_COMMAND_LINE_H_
#define GECD_CLI_COMMAND_LINE_H_

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/args.h"

// The start every gecd command with --help shares: parse the flags, answer --help, turn the
// flags into the command's options, and end a usage error with exit code 2.
namespace gecd::cli {

// One command's flags and help.
struct CommandLine {
  const char* name;              // messages start "gecd <name>: "
  std::vector<FlagSpec> flags;   // --help is added after them
  std::string usage;             // printed ahead of the flag list
  bool usage_on_error = false;   // a usage error also prints the usage and the flag list
  bool error_with_code = false;  // a usage error prints the status code too (Status::ToString)

  // `flags` with --help.
  std::vector<FlagSpec> AllFlags() const;
  // --help's answer, to stdout.
  void PrintHelp() const;
  // "gecd <name>: <error>" (then the usage and flag list if `usage_on_error`), to stderr.
  void PrintUsageError(const absl::Status& error) const;
};

// Parses `argv` for `command` and hands the flags to `parse` (const Args& ->
// absl::StatusOr<Options>). nullopt when the command should end now with `*exit_code`: 0 after
// --help, 2 after a bad flag or an error from `parse`, printed as PrintUsageError says.
template <typename Parse>
auto ParseCommandLine(const CommandLine& command, const std::vector<std::string>& argv,
                      Parse&& parse, int* exit_code)
    -> std::optional<typename std::invoke_result_t<Parse, const Args&>::value_type> {
  using Options = typename std::invoke_result_t<Parse, const Args&>::value_type;
  const absl::StatusOr<Args> args = Args::Parse(argv, command.AllFlags());
  if (args.ok() && args->Has("help")) {
    command.PrintHelp();
    *exit_code = 0;
    return std::nullopt;
  }
  absl::StatusOr<Options> options = args.ok() ? parse(*args) : args.status();
  if (!options.ok()) {
    command.PrintUsageError(options.status());
    *exit_code = 2;
    return std::nullopt;
  }
  return *std::move(options);
}

}  // namespace gecd::cli

#endif  // GECD_CLI_COMMAND_LINE_H_
