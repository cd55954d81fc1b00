#include "daemon/process_title.h"

#include <sys/prctl.h>

#include <algorithm>
#include <cstring>
#include <string>

extern char** environ;

namespace gecd::daemon {
namespace {

// The argv strings, laid out back to back and followed by the environment strings: the title
// may use all of them once the environment has moved to the heap.
char* g_area = nullptr;
size_t g_area_size = 0;

}  // namespace

void InitProcessTitle(int argc, char** argv) {
  if (argc < 1) return;
  g_area = argv[0];
  char* end = argv[0] + std::strlen(argv[0]) + 1;
  for (int i = 1; i < argc && argv[i] == end; ++i) end = argv[i] + std::strlen(argv[i]) + 1;
  // As nginx does: copy the environment (for the life of the process) so that a title longer
  // than the command line, "gecd: supervisor" after "gecd serve", fits.
  size_t n = 0;
  while (environ[n] != nullptr) ++n;
  char** moved = new char*[n + 1];
  for (size_t i = 0; i < n; ++i) {
    if (environ[i] == end) end = environ[i] + std::strlen(environ[i]) + 1;
    moved[i] = strdup(environ[i]);
  }
  moved[n] = nullptr;
  environ = moved;
  g_area_size = end - g_area;
}

void SetProcessTitle(std::string_view title) {
  if (g_area != nullptr) {
    const size_t n = std::min(title.size(), g_area_size - 1);
    std::memcpy(g_area, title.data(), n);
    // Zero the rest, so the old arguments do not show after the title.
    std::memset(g_area + n, 0, g_area_size - n);
  }
  const std::string comm(title.substr(0, 15));
  prctl(PR_SET_NAME, comm.c_str(), 0, 0, 0);
}

}  // namespace gecd::daemon
