#ifdef GECD_HAVE_SERVER
#include <cstdio>

#include "cli/commands.h"

namespace gecd::cli {

int RunServe(const std::vector<std::string>& args) {
  std::fprintf(stderr, "gecd serve: not built yet\n");  // placeholder: being written
  return 1;
}

}  // namespace gecd::cli
#endif
