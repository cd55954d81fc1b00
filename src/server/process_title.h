#ifndef GECD_SERVER_PROCESS_TITLE_H_
#define GECD_SERVER_PROCESS_TITLE_H_

#include <string_view>

// The title `ps` shows for this process ("gecd: supervisor", "gecd: worker 3"), as nginx does:
// the title overwrites the argv area that /proc/<pid>/cmdline reads, and the thread name
// (/proc/<pid>/comm, what `ps -e` and `top` show) is set to its first 15 bytes.
namespace gecd::server {

// Remembers argv's memory; main() calls it before anything reads argv again.
void InitProcessTitle(int argc, char** argv);
// Truncates `title` to the original argv area (which always holds at least argv[0]).
void SetProcessTitle(std::string_view title);

}  // namespace gecd::server

#endif  // GECD_SERVER_PROCESS_TITLE_H_
