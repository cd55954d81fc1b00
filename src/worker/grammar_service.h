#ifndef GECD_WORKER_GRAMMAR_SERVICE_H_
#define GECD_WORKER_GRAMMAR_SERVICE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "auth/token_table.h"
#include "common/mutex.h"
#include "common/pending_callbacks.h"
#include "config/config.h"
#include "gecd/internal/grammar_wire.pb.h"
#include "gecd/v1/grammar.pb.h"
#include "grpcpp/impl/service_type.h"
#include "grpcpp/support/server_callback.h"
#include "metrics/metrics.h"
#include "sentences/sentence_splitter.h"
#include "spelling/spell_corrector.h"
#include "text/offsets.h"
#include "text/prompt_builder.h"
#include "tokenizer/tokenizer.h"
#include "worker/admission.h"
#include "worker/engine_link.h"
#include "worker/refusal_pacer.h"
#include "worker/sentence_cache.h"
#include "worker/start_queue.h"
#include "worker/text_answer.h"
#include "worker/waiting_room.h"

// gecd.v1.GrammarCorrection on gRPC's callback API. A request's text is split into sentences
// (sentences::SentenceSplitter); each sentence is answered from the sentence cache
// (server.sentence_cache_mb, unless the request says cache: false) or becomes its own engine
// sequence, all submitted at once so that they batch, under the request's deadline. Each
// sentence goes first through admission (AdmissionController: server.max_in_flight, and its
// predicted time in the server against the latency objective server.slo_p99_ms or the call's
// deadline, if sooner), on its length alone, so a text costs the sum of its sentences; a
// refusal of any sentence refuses the text (RESOURCE_EXHAUSTED with the
// grpc-retry-pushback-ms trailer) and cancels the others. Then the checks
// (text::PromptBuilder::Check; a sentence over model.max_input_tokens comes back unchanged,
// flagged `skipped`), and only then the work that costs (the spelling stage, within
// spelling.budget_ms), so a flood of overload or bad input is refused before it can slow anyone
// down. When every sentence is done the answer is assembled (worker/text_answer.h): the whole
// text with each correction in place, edits and sentence spans in the request's offset unit. A
// text of only whitespace is answered unchanged at once. Nothing queues in the worker: a
// sentence it could not answer in time is refused with RESOURCE_EXHAUSTED at once. With a token
// table (auth.tokens_file) a call without a valid bearer token is refused with UNAUTHENTICATED
// before any of that, and the token's name labels the call's metrics and access-log lines.
// On CorrectStream a request with `stream_sentences` also has each sentence answered as it is
// done, before its text's answer (Process, AnswerSentenceOf).
namespace gecd::worker {

//
// The methods are gecd.v1.GrammarCorrection's (same names, so reflection describes the public
// proto), registered by hand with gecd.internal.CorrectRequest as the request type: its `text`
// is bytes, so invalid UTF-8 reaches the validator instead of failing to parse.
class GrammarService final : public grpc::Service {
 public:
  struct Options {
    // Texts of one CorrectStream in the engine or waiting to be written; the stream stops
    // reading while this many are outstanding, so a fast client is slowed, not buffered. A
    // text's sentence answers (`stream_sentences`) are not counted: they ride in its slot.
    int stream_window = 64;
    // The spelling stage (config section `spelling`), or null; must outlive the service.
    const model::SpellCorrector* spelling = nullptr;
    // Admission's clock (monotonic microseconds); null = the steady clock. Tests pass a fake.
    AdmissionController::Clock admission_clock = nullptr;
    // Bearer tokens (auth.tokens_file), or null: every call is let in. Must outlive the service.
    const auth::TokenTable* tokens = nullptr;
  };

  // Everything passed by reference must outlive the service (and the grpc::Server it is
  // registered with).
  GrammarService(const config::Config& config, const model::Tokenizer& tokenizer,
                 text::PromptBuilder prompts, sentences::SentenceSplitter splitter,
                 EngineLink& engine, metrics::ProcessMetrics& metrics, Options options);
  // Waits until the engine link has run (or dropped) every reply callback it was handed: they
  // capture `this`, and one still running after a drain's grace period would touch the
  // members being destroyed.
  ~GrammarService() override;

  grpc::ServerUnaryReactor* Correct(grpc::CallbackServerContext* context,
                                    const gecd::internal::CorrectRequest* request,
                                    gecd::v1::CorrectResponse* response);
  grpc::ServerBidiReactor<gecd::internal::CorrectRequest, gecd::v1::CorrectResponse>* CorrectStream(
      grpc::CallbackServerContext* context);

  // From now on new sentences fail with UNAVAILABLE; admitted ones are still answered, and each
  // open stream then finishes with UNAVAILABLE (new streams at once). The server's Shutdown
  // stops new RPCs.
  void StartDraining() ABSL_LOCKS_EXCLUDED(streams_mu_);
  bool draining() const { return draining_.load(std::memory_order_relaxed); }
  // Admitted sentences not yet answered.
  int in_flight() const { return admission_.in_flight(); }
  const SentenceCache& sentence_cache() const { return cache_; }
  // CorrectStream calls whose reactor is alive.
  int open_streams() const ABSL_LOCKS_EXCLUDED(streams_mu_);
  // CLOCK_MONOTONIC microseconds of the latest Correct or CorrectStream call's arrival; 0: none.
  int64_t last_call_us() const { return last_call_us_.load(std::memory_order_relaxed); }

 private:
  class UnaryCall;
  class StreamCall;
  struct Text;
  using Deadline = std::chrono::system_clock::time_point;
  // The outcome of one text: OK with `response` filled, or the failure. `request_id` is set
  // either way. `retry_after` is positive on a refusal that says when to come back.
  using TextDone = std::function<void(const grpc::Status&, gecd::v1::CorrectResponse,
                                      std::chrono::milliseconds retry_after)>;
  // One sentence of a text answered on its own (CorrectStream's `stream_sentences`): a response
  // with `request_id` and `sentence_answer` set.
  using SentenceAnswered = std::function<void(gecd::v1::CorrectResponse)>;
  // The outcome of one sentence of a text.
  using SentenceDone = std::function<void(const grpc::Status&, SentenceOutcome,
                                          std::chrono::milliseconds retry_after)>;

  // The name of the call's bearer token ("" without a token table), or UNAUTHENTICATED (then
  // counted and logged).
  absl::StatusOr<std::string> Authenticate(const grpc::CallbackServerContext& context);
  // The priority class of one text: its request's field, else the call's x-gecd-priority
  // metadata, else interactive; INVALID_ARGUMENT naming an unknown value and where it came from.
  static absl::StatusOr<AdmissionController::Priority> PriorityOf(
      const grpc::CallbackServerContext& context, const gecd::internal::CorrectRequest& request);
  // The request's offset_unit; INVALID_ARGUMENT naming the field for a value gecd.v1.OffsetUnit
  // does not have.
  static absl::StatusOr<text::OffsetUnit> OffsetUnitOf(
      const gecd::internal::CorrectRequest& request);
  // The call behind text `id` ended early (client gone or `deadline` passed): its sentences
  // in the waiting room are answered, those in the engine cancelled there.
  void CancelText(uint64_t id, Deadline deadline) ABSL_LOCKS_EXCLUDED(texts_mu_);
  // Cancels the sentences of `text` still running (one of them failed, or the call ended).
  void CancelSentences(Text& text, Deadline deadline);

  // Registers a new stream; returns whether the worker already drains. RemoveStream: OnDone.
  bool AddStream(StreamCall* stream) ABSL_LOCKS_EXCLUDED(streams_mu_);
  void RemoveStream(StreamCall* stream) ABSL_LOCKS_EXCLUDED(streams_mu_);
  uint64_t NextId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  // The engine id of sentence `index` of text `id`: unique while both are (a text has at most
  // server.max_input_chars <= 2^20 sentences).
  static uint64_t SentenceId(uint64_t id, size_t index) { return (id << 20) | index; }
  // Splits one text `id`, answers what the cache holds, and processes the other sentences
  // (ProcessSentences); `done` runs exactly once: inline when the text is refused, invalid or
  // all cached, else on the thread of its last sentence's answer. `client` is the name of the
  // call's bearer token, or "". `sentence_answered`, when not null, runs once for each sentence
  // that succeeds while its text has not failed (cached and skipped ones included), as it is
  // done and always before `done`; never for a text that fails the whole text's checks.
  void Process(uint64_t id, const gecd::internal::CorrectRequest& request, Deadline deadline,
               absl::StatusOr<AdmissionController::Priority> priority, std::string client,
               TextDone done, SentenceAnswered sentence_answered = nullptr);
  // Sends sentence `index` of `text` to its text's sentence_answered (see Process), unless the
  // text fails the whole text's checks.
  void AnswerSentenceOf(Text& text, size_t index, const SentenceOutcome& outcome);
  // Admits together (or refuses, or has wait in the waiting room together: the batch class,
  // and any text before a first answer) the sentences `indices` of `text`, and submits each
  // under its SentenceId; each one's end reaches SentenceFinished exactly once: inline when
  // refused at once, else on the engine link's, the refusal pacer's, the waiting room's or the
  // start queue's thread (an invalid sentence's too). Once the text has failed, its sentences not
  // yet started are not.
  void ProcessSentences(const std::shared_ptr<Text>& text, std::vector<size_t> indices,
                        uint32_t max_output_tokens, Deadline deadline,
                        AdmissionController::Priority klass);
  // A sentence's times on the monotonic clock, as EngineRequest carries them.
  struct SentenceTimes {
    int64_t arrival_us = 0;
    int64_t due_us = 0;
    int64_t deadline_us = 0;  // 0: none
  };
  // An admitted sentence (`ticket`): the checks, the spelling stage, and the engine.
  void Start(uint64_t id, std::string_view sentence, uint32_t max_output_tokens, Deadline deadline,
             const SentenceTimes& times, const AdmissionController::Ticket& ticket,
             const SentenceDone& reply);
  // One admitted sentence left; `output_tokens` as AdmissionController::Release takes it.
  void Release(const AdmissionController::Ticket& ticket, int output_tokens);
  // Answers `text` once no sentence of it runs: its first failure, or a failed check of the
  // whole text, or the assembled answer.
  void FinishText(Text& text);
  // One sentence of `text` is done; the last assembles and sends the text's answer.
  void SentenceFinished(const std::shared_ptr<Text>& text, size_t index, const grpc::Status& status,
                        SentenceOutcome outcome, std::chrono::milliseconds retry_after)
      ABSL_LOCKS_EXCLUDED(texts_mu_);

  const model::Tokenizer& tokenizer_;
  EngineLink& engine_;
  metrics::ProcessMetrics& metrics_;
  const Options options_;
  const text::PromptBuilder prompts_;
  const sentences::SentenceSplitter splitter_;
  const std::string cache_fingerprint_;              // SentenceCache::Fingerprint of the config
  const size_t max_input_chars_;                     // server.max_input_chars
  const std::chrono::milliseconds spelling_budget_;  // spelling.budget_ms
  const std::chrono::milliseconds slo_;              // server.slo_p99_ms
  const uint32_t model_max_output_tokens_;           // model.max_output_tokens
  AdmissionController admission_;
  SentenceCache cache_;
  // The refusal pacer's state as metrics (gecd_refusals_held, gecd_refusal_storms_total, ...).
  class PacerMetrics final : public RefusalPacer::Observer {
   public:
    explicit PacerMetrics(metrics::ProcessMetrics& metrics) : metrics_(metrics) {}
    void Held(size_t held, bool storm) override {
      metrics_.SetRefusalsHeld(static_cast<int64_t>(held), storm);
    }
    void StormBegun() override { metrics_.RefusalStormBegun(); }
    void StormLeftForGrowth() override { metrics_.RefusalStormLeftForGrowth(); }

   private:
    metrics::ProcessMetrics& metrics_;
  };
  PacerMetrics pacer_metrics_;
  // Declared after everything its thread's sentences use, so that it stops first.
  // Before waiting_room_, whose sentences may be refused through it.
  RefusalPacer refusal_pacer_;
  // Before waiting_room_, whose sentences start through it.
  StartQueue start_queue_;
  WaitingRoom waiting_room_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> last_call_us_{0};
  // Taken before a stream's own lock (StartDraining).
  mutable Mutex streams_mu_;
  std::set<StreamCall*> streams_ ABSL_GUARDED_BY(streams_mu_);
  // Texts with sentences in flight, by id, so that a cancelled call finds them.
  mutable Mutex texts_mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Text>> texts_ ABSL_GUARDED_BY(texts_mu_);
  // The engine link's reply callbacks not yet ended (see the destructor).
  PendingCallbacks engine_callbacks_;
};

}  // namespace gecd::worker

#endif  // GECD_WORKER_GRAMMAR_SERVICE_H_
