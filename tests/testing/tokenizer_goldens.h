#ifndef GECD_TESTS_TESTING_TOKENIZER_GOLDENS_H_
#define GECD_TESTS_TESTING_TOKENIZER_GOLDENS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// The tokenizer golden files tools/fixtures/make_tokenizer_fixtures.py writes: one JSON object
// a line, {"kind", "text", "ids"}, the ids from the reference library.
namespace gecd::testing {

struct TokenizerGolden {
  std::string kind;  // "edge", "brown", "mix" or "long"
  std::string text;
  std::vector<int32_t> ids;
};

absl::StatusOr<std::vector<TokenizerGolden>> ReadTokenizerGoldens(const std::string& path);

// `text` with non-printable and non-ASCII bytes escaped, cut to `max_chars`, for failure
// messages.
std::string Printable(std::string_view text, size_t max_chars = 120);

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_TOKENIZER_GOLDENS_H_
