#ifndef GECD_EVAL_SYNTHETIC_H_
#define GECD_EVAL_SYNTHETIC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// The synthetic test set: one example per line, `error_type<TAB>source<TAB>target`; lines
// starting with '#' and blank lines are skipped. error_type "none" marks a correct sentence
// (target == source), where any change is a false change. Outputs are compared with targets
// after NormalizeWhitespace.
namespace gecd::eval {

inline constexpr std::string_view kNoErrorType = "none";

struct SyntheticExample {
  std::string error_type;
  std::string source;
  std::string target;
  int line = 0;  // 1-based, in the file
};

// InvalidArgument naming `path` and the line for a line without exactly three tab-separated
// fields, an empty field, or a "none" line whose target differs from its source; also for a
// file with no examples.
absl::StatusOr<std::vector<SyntheticExample>> ParseSyntheticTsv(std::string_view content,
                                                                std::string_view path);
// Reads and parses a file (NotFound when missing). `limit` > 0 keeps the first `limit`.
absl::StatusOr<std::vector<SyntheticExample>> LoadSyntheticFile(const std::string& path,
                                                                int limit = 0);

struct ExactMatch {
  std::string error_type;  // "" for the overall row
  int64_t sentences = 0;
  int64_t exact = 0;  // output == target
  double accuracy() const { return sentences == 0 ? 0 : static_cast<double>(exact) / sentences; }
};

struct SyntheticScore {
  std::vector<ExactMatch> by_type;  // sorted by error type
  ExactMatch overall;
  int64_t none_sentences = 0;
  int64_t false_changes = 0;  // "none" sentences whose output != source
  double false_change_rate() const {
    return none_sentences == 0 ? 0 : static_cast<double>(false_changes) / none_sentences;
  }
};

// Scores `outputs` (one per example, in order). InvalidArgument on a size mismatch.
absl::StatusOr<SyntheticScore> ScoreSynthetic(const std::vector<SyntheticExample>& examples,
                                              const std::vector<std::string>& outputs);

// The fraction of positions where the two output lists agree (whitespace-normalised); 1 for
// two empty lists. InvalidArgument on a size mismatch.
absl::StatusOr<double> AgreementRate(const std::vector<std::string>& a,
                                     const std::vector<std::string>& b);

}  // namespace gecd::eval

#endif  // GECD_EVAL_SYNTHETIC_H_
