#ifndef GECD_TESTS_TESTING_TEST_PATHS_H_
#define GECD_TESTS_TESTING_TEST_PATHS_H_

#include <optional>
#include <string>

// Where tests find their inputs: the source tree (checked-in fixtures), the build tree, a fresh
// scratch directory, and the optional ../shared data beside the project.
namespace gecd::testing {

std::string SourceDir();
std::string BinaryDir();
// tests/fixtures/<relative>
std::string FixturePath(const std::string& relative);
// ../shared/data/<relative> when it exists (GECD_SHARED_DIR overrides ../shared); tests that
// need it GTEST_SKIP() when this is nullopt.
std::optional<std::string> SharedDataPath(const std::string& relative);
// A new empty directory, unique per call, removed with all the others when the process exits.
std::string MakeTempDir();

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_TEST_PATHS_H_
