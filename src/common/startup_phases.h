#ifndef GECD_COMMON_STARTUP_PHASES_H_
#define GECD_COMMON_STARTUP_PHASES_H_

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// Where a process's start-up went: the named phases from exec to serving, each timed on the
// monotonic clock and on the marking thread's CPU clock. A slow start (a cold page cache, a big
// checkpoint, a slow device) then says in its own log which phase took the time, and whether
// it computed, waited for I/O or waited for a core; the cold-start benchmark reads the same
// line.
namespace gecd {

// The phases one process went through so far. Not thread-safe: the thread that starts the
// process marks them, and the CPU time is that thread's (work it hands to other threads shows
// as wall time only).
class StartupPhases {
 public:
  using Clock = std::chrono::steady_clock;

  // Times from now. `since_exec`: how long the process ran before (loading the binary and its
  // libraries, static initialisers), and `cpu_since_exec` the CPU time it took; nullopt where
  // they are not known.
  explicit StartupPhases(std::optional<std::chrono::microseconds> since_exec = std::nullopt,
                         std::chrono::microseconds cpu_since_exec = std::chrono::microseconds(0),
                         Clock::time_point start = Clock::now());

  // Ends the phase running since the last mark (or the start) now, naming it. Phases of the
  // same name add up. A name holds no ", " (the summary separates phases by it).
  void Mark(std::string_view phase);
  // The same with the clocks' readings given (tests).
  void Mark(std::string_view phase, Clock::time_point now, std::chrono::microseconds cpu_now);

  // "exec→main 21 ms (20 ms CPU), config 2 ms (2 ms CPU); 633 ms since exec (410 ms CPU)":
  // each phase rounded to the millisecond, in the order first marked, and the totals since
  // exec (since the start when that is not known) at the last mark.
  std::string Summary() const;

  // The total Summary() ends with.
  std::chrono::microseconds Total() const;

 private:
  struct Phase {
    std::string name;
    std::chrono::microseconds took;
    std::chrono::microseconds cpu;
  };
  std::optional<std::chrono::microseconds> since_exec_;
  std::chrono::microseconds cpu_since_exec_;
  Clock::time_point start_;
  Clock::time_point last_;
  std::chrono::microseconds cpu_start_;
  std::chrono::microseconds cpu_last_;
  std::vector<Phase> phases_;
};

// How long this process has run, from its start time in /proc/self/stat (to the kernel's
// clock-tick resolution, usually 10 ms); nullopt where /proc is not readable.
std::optional<std::chrono::microseconds> TimeSinceExec();

// The calling thread's CPU time (user and system) so far.
std::chrono::microseconds ThreadCpuTime();

// The process's own phases, timed from its first use (main() uses it first thing, so the
// exec→main phase is what ran before main).
StartupPhases& ProcessStartup();

}  // namespace gecd

#endif  // GECD_COMMON_STARTUP_PHASES_H_
