#ifndef GECD_TESTS_TESTING_SCOPED_TEMP_DIR_H_
#define GECD_TESTS_TESTING_SCOPED_TEMP_DIR_H_

#include <filesystem>
#include <string>
#include <system_error>

#include "testing/test_paths.h"

namespace gecd::testing {

// A MakeTempDir() directory that is removed, with everything in it, when this goes out of
// scope, so tests and benchmarks that write models do not fill the temp dir run after run.
class ScopedTempDir {
 public:
  ScopedTempDir() : path_(MakeTempDir()) {}
  ~ScopedTempDir() {
    std::error_code ec;  // best effort: a leftover temp dir must not fail the run
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_SCOPED_TEMP_DIR_H_
