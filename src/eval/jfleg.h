#ifndef GECD_EVAL_JFLEG_H_
#define GECD_EVAL_JFLEG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

// Reading evaluation inputs: line files and a JFLEG split (`<split>.src` and
// `<split>.ref0`, `<split>.ref1`, … in one directory, one Penn-Treebank-tokenized sentence per
// line, line i of every file about the same sentence).
namespace gecd::eval {

struct JflegSet {
  std::string dir;
  std::string split;                                 // "dev" or "test"
  std::vector<std::string> sources;                  // tokenized, as in the file
  std::vector<std::vector<std::string>> references;  // [k][i], tokenized
};

// Loads `dir`/`split`.src and every consecutive `split`.ref0, .ref1, … (at least ref0).
// Errors name the file: missing, empty, or a line count that differs from the source's (both
// counts). `limit` > 0 keeps only the first `limit` sentences.
absl::StatusOr<JflegSet> LoadJfleg(const std::string& dir, const std::string& split = "dev",
                                   int limit = 0);

}  // namespace gecd::eval

#endif  // GECD_EVAL_JFLEG_H_
