#include "daemon/client_counters.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gecd::daemon {

void ClientCounters::Add(std::string_view client, int grpc_code) {
  const int code = prometheus::CodeIndex(grpc_code);
  client = client.substr(0, kMaxName);
  Slot* slot = nullptr;
  for (int i = 0; i < kMaxClients && slot == nullptr; ++i) {
    Slot& candidate = slots_[i];
    uint32_t state = candidate.state.load(std::memory_order_acquire);
    if (state == Slot::kFree && candidate.state.compare_exchange_strong(
                                    state, Slot::kClaiming, std::memory_order_acquire)) {
      std::copy(client.begin(), client.end(), candidate.name.begin());
      candidate.name[client.size()] = '\0';
      candidate.state.store(Slot::kReady, std::memory_order_release);
      slot = &candidate;
    } else if (state == Slot::kReady && std::string_view(candidate.name.data()) == client) {
      slot = &candidate;
    }
  }
  if (slot == nullptr) slot = &slots_[kMaxClients];  // "other"
  slot->calls[code].fetch_add(1, std::memory_order_relaxed);
}

void ClientCounters::SumInto(ClientTotals& totals) const {
  for (int i = 0; i <= kMaxClients; ++i) {
    const Slot& slot = slots_[i];
    std::string name = "other";
    if (i < kMaxClients) {
      if (slot.state.load(std::memory_order_acquire) != Slot::kReady) continue;
      name = std::string(slot.name.data());
    }
    std::array<uint64_t, prometheus::kNumCodes> counts{};
    uint64_t total = 0;
    for (int c = 0; c < prometheus::kNumCodes; ++c) {
      counts[c] = slot.calls[c].load(std::memory_order_relaxed);
      total += counts[c];
    }
    if (total == 0) continue;
    std::array<uint64_t, prometheus::kNumCodes>& sum = totals[name];
    for (int c = 0; c < prometheus::kNumCodes; ++c) sum[c] += counts[c];
  }
}

void AppendClientTotals(std::string& out, std::string_view metric, std::string_view help,
                        const ClientTotals& totals) {
  if (totals.empty()) return;
  prometheus::AppendHeader(out, metric, help, "counter");
  for (const auto& [client, counts] : totals) {
    for (int c = 0; c < prometheus::kNumCodes; ++c) {
      if (counts[c] == 0) continue;
      absl::StrAppend(&out, std::string(metric), "{client=\"", client, "\",code=\"",
                      std::string(prometheus::CodeName(c)), "\"} ", counts[c], "\n");
    }
  }
}

}  // namespace gecd::daemon
