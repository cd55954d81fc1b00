#include "testing/run_gecd.h"

#include <sys/wait.h>

#include <cstdio>

#include "testing/test_paths.h"

namespace gecd::testing {

RunResult RunGecd(const std::string& args) {
  const std::string cmd = BinaryDir() + "/gecd " + args + " 2>&1";
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) {
    out.push_back(s.substr(start, nl - start));
  }
  return out;
}

}  // namespace gecd::testing
