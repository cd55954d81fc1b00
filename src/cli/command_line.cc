#include "cli/command_line.h"

#include <cstdio>

namespace gecd::cli {

std::vector<FlagSpec> CommandLine::AllFlags() const {
  std::vector<FlagSpec> all = flags;
  all.push_back({"help", false, "show this help"});
  return all;
}

void CommandLine::PrintHelp() const {
  std::printf("%s%s", usage.c_str(), FlagHelp(AllFlags()).c_str());
}

void CommandLine::PrintUsageError(const absl::Status& error) const {
  const std::string message = error_with_code ? error.ToString() : std::string(error.message());
  std::fprintf(stderr, "gecd %s: %s\n", name, message.c_str());
  if (usage_on_error) std::fprintf(stderr, "%s%s", usage.c_str(), FlagHelp(AllFlags()).c_str());
}

}  // namespace gecd::cli
