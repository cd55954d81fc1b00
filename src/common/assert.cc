#include "common/assert.h"

#include <cstdlib>

#include "spdlog/spdlog.h"

namespace gecd::internal {

void AssertionFailed(const char* file, int line, const char* condition, std::string_view message) {
  spdlog::critical("{}:{}: assertion failed: {}: {}", file, line, condition, message);
  spdlog::default_logger()->flush();
  std::abort();
}

}  // namespace gecd::internal
