#ifndef GECD_CLI_COMMANDS_H_
#define GECD_CLI_COMMANDS_H_

#include <string>
#include <vector>

// The gecd subcommands. Each takes the arguments after its name and returns the process exit
// code; errors are printed to stderr by the command itself.
namespace gecd::cli {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

int RunEval(const std::vector<std::string>& args);
int RunGenerate(const std::vector<std::string>& args);
int RunInspect(const std::vector<std::string>& args);
int RunQuantize(const std::vector<std::string>& args);
int RunVersion(const std::vector<std::string>& args);
int RunServe(const std::vector<std::string>& args);    // only with GECD_HAVE_SERVER
int RunRoute(const std::vector<std::string>& args);    // only with GECD_HAVE_SERVER
int RunTune(const std::vector<std::string>& args);     // only with GECD_HAVE_SERVER
int RunCorrect(const std::vector<std::string>& args);  // only with GECD_HAVE_SERVER
// A process `gecd serve` started (GECD_ROLE set: "engine" or "worker"); only with
// GECD_HAVE_SERVER.
int RunChildRole(const std::string& role);

const std::vector<Command>& AllCommands();

}  // namespace gecd::cli

#endif  // GECD_CLI_COMMANDS_H_
