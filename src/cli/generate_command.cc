#include <cstdio>

#include "cli/commands.h"

namespace gecd::cli {

int RunGenerate(const std::vector<std::string>& args) {
  std::fprintf(stderr, "gecd generate: not built yet\n");
  return 1;
}

}  // namespace gecd::cli
