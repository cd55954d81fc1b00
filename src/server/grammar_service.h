#ifndef GECD_SERVER_GRAMMAR_SERVICE_H_
#define GECD_SERVER_GRAMMAR_SERVICE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include "config/config.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "model/spell_corrector.h"
#include "model/tokenizer.h"
#include "server/engine_link.h"
#include "server/metrics.h"
#include "pipeline/prompt_builder.h"

// gecd.v1.GrammarCorrection on gRPC's callback API. Each sentence goes through the cheap checks
// (pipeline::PromptBuilder::Check), then admission under the worker's in-flight limit, and
// only then the work that costs (the spelling stage, within spelling.budget_ms), so a flood of
// bad or expensive input is refused before it can slow anyone down. Admitted sentences go to
// the engine and are answered with the detokenized correction and its edits; a text of only
// whitespace is answered unchanged at once. Nothing queues in the worker: beyond
// server.max_in_flight a sentence is refused with RESOURCE_EXHAUSTED.
namespace gecd::server {

class GrammarService final : public gecd::v1::GrammarCorrection::CallbackService {
 public:
  struct Options {
    // Sentences of one CorrectStream in the engine or waiting to be written; the stream stops
    // reading while this many are outstanding, so a fast client is slowed, not buffered.
    int stream_window = 64;
    // The spelling stage (config section `spelling`), or null; must outlive the service.
    const model::SpellCorrector* spelling = nullptr;
  };

  // Everything passed must outlive the service (and the grpc::Server it is registered with).
  GrammarService(const config::Config& config, const model::Tokenizer& tokenizer,
                 pipeline::PromptBuilder prompts, EngineLink& engine, ProcessMetrics& metrics,
                 Options options);

  grpc::ServerUnaryReactor* Correct(grpc::CallbackServerContext* context,
                                    const gecd::v1::CorrectRequest* request,
                                    gecd::v1::CorrectResponse* response) override;
  grpc::ServerBidiReactor<gecd::v1::CorrectRequest, gecd::v1::CorrectResponse>* CorrectStream(
      grpc::CallbackServerContext* context) override;

  // From now on new sentences (also on open streams) fail with UNAVAILABLE; admitted ones are
  // still answered. The server's Shutdown stops new RPCs.
  void StartDraining() { draining_.store(true, std::memory_order_relaxed); }
  bool draining() const { return draining_.load(std::memory_order_relaxed); }
  int in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

 private:
  class UnaryCall;
  class StreamCall;
  using Deadline = std::chrono::system_clock::time_point;
  // The outcome of one sentence: OK with `response` filled, or the failure. `request_id` is set
  // either way.
  using SentenceDone = std::function<void(const grpc::Status&, gecd::v1::CorrectResponse)>;

  uint64_t NextId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  // Validates, admits and submits one sentence under engine id `id`. `done` runs exactly once:
  // inline when the sentence is refused, else on the engine link's thread.
  void Process(uint64_t id, const gecd::v1::CorrectRequest& request, Deadline deadline,
               SentenceDone done);
  bool TryAdmit();
  void Release();

  const model::Tokenizer& tokenizer_;
  EngineLink& engine_;
  ProcessMetrics& metrics_;
  const Options options_;
  const pipeline::PromptBuilder prompts_;
  const std::chrono::milliseconds spelling_budget_;  // spelling.budget_ms
  const int max_in_flight_;
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> draining_{false};
};

}  // namespace gecd::server

#endif  // GECD_SERVER_GRAMMAR_SERVICE_H_
