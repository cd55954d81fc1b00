#include "engine/output_collector.h"

#include <utility>

namespace gecd::engine {

bool OutputCollector::Add(const StepEvent& event) {
  std::vector<int32_t>& tokens = outputs_[event.id];
  if (event.reason != FinishReason::kStopToken) tokens.push_back(event.token);
  return event.finished;
}

std::vector<int32_t> OutputCollector::Take(SequenceId id) {
  const auto it = outputs_.find(id);
  if (it == outputs_.end()) return {};
  std::vector<int32_t> tokens = std::move(it->second);
  outputs_.erase(it);
  return tokens;
}

}  // namespace gecd::engine
