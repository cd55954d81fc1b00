#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cli/commands.h"
#include "common/startup_phases.h"
#ifdef GECD_HAVE_SERVER
#include "daemon/process_title.h"
#include "supervisor/roles.h"
#endif

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: gecd <command> [flags]\n\ncommands:\n");
  for (const auto& c : gecd::cli::AllCommands())
    std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n'gecd <command> --help' describes a command's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  gecd::ProcessStartup();  // its clock starts here; exec→main is what ran before
  // Debian builds Abseil without NDEBUG, so every absl::Mutex (gRPC takes several per call)
  // would otherwise record lock-order graphs to detect deadlocks: ~7% of the router's perf
  // samples, in gRPC's locks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#ifdef GECD_HAVE_SERVER
  gecd::daemon::InitProcessTitle(argc, argv);
  // A child of `gecd serve`: its argv is only a title for ps; the role comes from the
  // environment.
  if (const char* role = std::getenv(gecd::supervisor::kRoleEnv))
    return gecd::cli::RunChildRole(role);
#endif
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    PrintUsage(stdout);
    return 0;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : gecd::cli::AllCommands()) {
    if (name == c.name) return c.run(args);
  }
  std::fprintf(stderr, "gecd: unknown command '%s'\n\n", name.c_str());
  PrintUsage(stderr);
  return 2;
}
