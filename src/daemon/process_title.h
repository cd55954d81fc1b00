#ifndef GECD_DAEMON_PROCESS_TITLE_H_
#define GECD_DAEMON_PROCESS_TITLE_H_

#include <string_view>

// The title `ps` shows for this process ("gecd: supervisor", "gecd: worker 3"), as nginx does:
// the title overwrites the argv area that /proc/<pid>/cmdline reads, and the thread name
// (/proc/<pid>/comm, what `ps -e` and `top` show) is set to its first 15 bytes.
namespace gecd::daemon {

// Remembers argv's memory and moves the environment out of the way; main() calls it first,
// before anything keeps a pointer into argv or the environment.
void InitProcessTitle(int argc, char** argv);
// Truncates `title` to the argv and environment strings' original size.
void SetProcessTitle(std::string_view title);

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_PROCESS_TITLE_H_
