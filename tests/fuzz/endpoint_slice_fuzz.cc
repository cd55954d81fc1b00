// libFuzzer target: an EndpointSlice (or a watch event's object) from the Kubernetes API is
// text another system wrote; reading it must give a slice or an error, never a crash or an
// escaped exception, and a merged report must hold each address once, sorted.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "nlohmann/json.hpp"
#include "route/endpoint_slices.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return 0;
  // A watch event carries the slice under "object"; a list, under "items".
  const nlohmann::json* slice = &parsed;
  if (parsed.is_object() && parsed.contains("object")) slice = &parsed["object"];
  gecd::route::SliceSet set;
  for (const char* port : {"grpc", "50051"}) {
    auto read = gecd::route::ParseEndpointSlice(*slice, port);
    if (read.ok()) set.Upsert(*std::move(read));
  }
  const auto merged = set.Merged();
  for (size_t i = 1; i < merged.size(); ++i) {
    if (!(merged[i - 1].address < merged[i].address)) std::abort();
  }
  return 0;
}
