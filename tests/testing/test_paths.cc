#include "testing/test_paths.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace gecd::testing {

std::string SourceDir() { return GECD_SOURCE_DIR; }
std::string BinaryDir() { return GECD_BINARY_DIR; }

std::string FixturePath(const std::string& relative) {
  return SourceDir() + "/tests/fixtures/" + relative;
}

std::optional<std::string> SharedDataPath(const std::string& relative) {
  const char* env = std::getenv("GECD_SHARED_DIR");
  const std::filesystem::path shared = env != nullptr
                                           ? std::filesystem::path(env)
                                           : std::filesystem::path(SourceDir()) / ".." / "shared";
  const std::filesystem::path p = shared / "data" / relative;
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) return std::nullopt;
  return p.lexically_normal().string();
}

namespace {

// One directory per test process holds every MakeTempDir(); it is removed when the process
// exits normally, so runs do not pile up directories in /tmp. A crashed run leaves it for
// inspection.
class ProcessTempRoot {
 public:
  ProcessTempRoot() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gecd-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~ProcessTempRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

std::string MakeTempDir() {
  static const ProcessTempRoot root;
  std::string tmpl = root.path() + "/dir-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

}  // namespace gecd::testing
