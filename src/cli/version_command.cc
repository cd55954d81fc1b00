#include <cstdio>

#include "cli/commands.h"
#include "gecd/version.h"
#ifdef GECD_HAVE_CUDA
#include "kernels/device_info.h"
#endif

namespace gecd::cli {

int RunVersion(const std::vector<std::string>& args) {
  std::printf("gecd %s\n", GECD_VERSION_STRING);
#ifdef GECD_HAVE_CUDA
  const auto list = kernels::ListDevices();
  std::printf("CUDA runtime %d.%d\n", list.runtime_version / 1000,
              list.runtime_version % 1000 / 10);
  if (list.devices.empty()) std::printf("no GPU: %s\n", list.error.c_str());
  for (const auto& d : list.devices) {
    std::printf("GPU %d: %s (sm_%d%d, %d SMs, %.1f GiB)\n", d.id, d.name.c_str(), d.sm_major,
                d.sm_minor, d.multiprocessors, d.total_memory / (1024.0 * 1024 * 1024));
  }
#else
  std::printf("built without CUDA (CPU backend only)\n");
#endif
  return 0;
}

}  // namespace gecd::cli
