#include <cstdio>

#include "cli/commands.h"

namespace gecd::cli {

int RunQuantize(const std::vector<std::string>& args) {
  std::fprintf(stderr, "gecd quantize: not built yet\n");
  return 1;
}

}  // namespace gecd::cli
