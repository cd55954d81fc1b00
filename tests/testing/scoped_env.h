#ifndef GECD_TESTS_TESTING_SCOPED_ENV_H_
#define GECD_TESTS_TESTING_SCOPED_ENV_H_

#include <cstdlib>
#include <optional>
#include <string>

namespace gecd::testing {

// Sets one environment variable (or with nullptr unsets it) for a scope and puts back what was
// there, so a test that reads the environment leaves the next test in the process the one it
// found. Not thread-safe: the environment is the process's (setenv/getenv).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) saved_ = old;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (saved_.has_value()) {
      setenv(name_.c_str(), saved_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

}  // namespace gecd::testing

#endif  // GECD_TESTS_TESTING_SCOPED_ENV_H_
