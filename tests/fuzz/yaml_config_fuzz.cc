// Any bytes as a YAML config: parsing must end in a Config or an error, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = gecd::config::ParseConfig(text, "fuzz.yaml");
  if (config.ok()) {
    // Overrides on a valid config exercise the same field table from the other entry point.
    (void)gecd::config::ApplyOverride(*config, "engine.threads", text.substr(0, 8));
  }
  return 0;
}
