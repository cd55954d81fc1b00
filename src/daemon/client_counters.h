#ifndef GECD_DAEMON_CLIENT_COUNTERS_H_
#define GECD_DAEMON_CLIENT_COUNTERS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "daemon/prometheus_text.h"

// Calls counted by the name of the client's bearer token (auth.tokens_file) and gRPC code:
// gecd serve's gecd_client_requests_total and gecd route's gecd_route_client_calls_total.
// A fixed table, zeroed = empty, with no pointer in it, so it can live in the shared segment
// (each worker's metrics block holds one). Lock-free, any thread.
namespace gecd::daemon {

// Summed over tables: name -> count by code index.
using ClientTotals = std::map<std::string, std::array<uint64_t, prometheus::kNumCodes>>;

class ClientCounters {
 public:
  // The first kMaxClients names each get a slot; later names count as "other".
  static constexpr int kMaxClients = 16;
  static constexpr size_t kMaxName = 48;  // auth/token_table.h's limit

  void Add(std::string_view client, int grpc_code);
  // Adds this table's counts into `totals`, by name (slots with no count are left out).
  void SumInto(ClientTotals& totals) const;

 private:
  // Claimed free -> claiming -> ready by the one thread that wins the compare-exchange, which
  // writes the name before publishing it; readers read only ready slots. Two threads claiming
  // two slots for one name at once is harmless: SumInto adds slots by name.
  struct Slot {
    static constexpr uint32_t kFree = 0, kClaiming = 1, kReady = 2;
    std::atomic<uint32_t> state;
    std::array<char, kMaxName + 1> name;  // NUL-terminated
    std::array<std::atomic<uint64_t>, prometheus::kNumCodes> calls;
  };
  std::array<Slot, kMaxClients + 1> slots_{};  // the last: "other"
};

// `metric`'s HELP, TYPE and one sample per name and code seen; nothing when `totals` is empty
// (no auth.tokens_file). Names are [A-Za-z0-9._-] (auth/token_table.h): no escaping needed.
void AppendClientTotals(std::string& out, std::string_view metric, std::string_view help,
                        const ClientTotals& totals);

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_CLIENT_COUNTERS_H_
