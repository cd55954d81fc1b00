#include "pipeline/output_collector.h"

#include <utility>

#include "model/utf8.h"

namespace gecd::pipeline {

bool OutputCollector::Add(const engine::StepEvent& event) {
  std::vector<int32_t>& tokens = outputs_[event.id];
  if (event.reason != engine::FinishReason::kStopToken) tokens.push_back(event.token);
  return event.finished;
}

std::vector<int32_t> OutputCollector::Take(engine::SequenceId id) {
  const auto it = outputs_.find(id);
  if (it == outputs_.end()) return {};
  std::vector<int32_t> tokens = std::move(it->second);
  outputs_.erase(it);
  return tokens;
}

std::string OutputCollector::Text(const model::Tokenizer& tokenizer,
                                  std::span<const int32_t> tokens) {
  return model::ToValidUtf8(tokenizer.Decode(tokens));
}

}  // namespace gecd::pipeline
