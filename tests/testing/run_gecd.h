#ifndef GECD_TESTS_TESTING_RUN_GECD_H_
#define GECD_TESTS_TESTING_RUN_GECD_H_

#include <string>
#include <vector>

// Runs the built `gecd` binary the way a user would, for tests of the command line.
namespace gecd::testing {

struct RunResult {
  int exit_code = -1;  // -1: did not start or did not exit normally
  std::string output;  // stdout and stderr
};

// `args` is passed through the shell after "build/gecd ".
RunResult RunGecd(const std::string& args);

// The '\n'-terminated lines of `s` (a last line without '\n' is dropped).
std::vector<std::string> Lines(const std::string& s);

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_RUN_GECD_H_
