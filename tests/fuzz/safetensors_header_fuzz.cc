// libFuzzer target: ParseSafetensorsHeader on arbitrary bytes must return a Status, never crash,
// throw, or read outside the input; an accepted header's ranges must lie inside it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = gecd::model::ParseSafetensorsHeader({data, size}, "fuzz.safetensors");
  if (!header.ok()) return 0;
  for (const auto& [name, entry] : header->tensors) {
    if (entry.begin > entry.end || header->data_offset + entry.end > size) std::abort();
  }
  return 0;
}
