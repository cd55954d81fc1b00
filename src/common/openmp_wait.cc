#include "common/openmp_wait.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace gecd {

std::vector<std::string> OpenMpWaitChoices() {
  std::vector<std::string> choices;
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && value[0] != '\0') choices.push_back(absl::StrCat(name, "=", value));
  }
  return choices;
}

}  // namespace gecd
