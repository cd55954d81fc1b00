#include <cstdio>

#include "cli/commands.h"

namespace gecd::cli {

int RunInspect(const std::vector<std::string>& args) {
  std::fprintf(stderr, "gecd inspect: not built yet\n");
  return 1;
}

}  // namespace gecd::cli
