#ifndef GECD_LOADGEN_LOAD_OPTIONS_H_
#define GECD_LOADGEN_LOAD_OPTIONS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loadgen/find_max.h"
#include "loadgen/load_runner.h"
#include "loadgen/typing_session.h"

namespace gecd::loadgen {

// Everything gecd-load's command line says.
struct LoadOptions {
  RunConfig run;  // sentences not yet read
  std::string input_path;
  std::string text_separator;  // --text-separator: whole texts, each ended by this line
  std::string json_path;
  std::string csv_path;
  int metrics_port = 0;  // --metrics-port: the daemon's, on this machine; 0: not read
  bool find_max = false;
  FindMaxOptions find_max_options;
  // --typing-sessions N (sessions > 0): the typing-session workload instead of a timed run;
  // its seed is --seed.
  TypingSessionOptions typing;
  bool help = false;
};

extern const char kLoadUsage[];

// "1.5" or "1.5s", "250ms", "2m" → seconds.
absl::StatusOr<double> ParseDuration(std::string_view text);

// argv without the program name. Conflicting modes (--concurrency with --qps or --profile,
// --find-max with either, --typing-sessions with any flag of a timed run) are errors, as are
// the other --typing-* flags without --typing-sessions.
absl::StatusOr<LoadOptions> ParseLoadOptions(const std::vector<std::string>& args);

// The file's non-empty lines; or with a `text_separator`, its texts: the lines between
// separator lines, joined by "\n" (line breaks and blank lines inside a text kept, a text of
// only whitespace dropped). An error if it cannot be read or has none.
absl::StatusOr<std::vector<std::string>> ReadSentences(const std::string& path,
                                                       const std::string& text_separator = "");

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_LOAD_OPTIONS_H_
