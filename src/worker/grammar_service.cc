#include "worker/grammar_service.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/monotonic_clock.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "grpcpp/impl/codegen/server_callback_handlers.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "spdlog/spdlog.h"
#include "text/output_text.h"

namespace gecd::worker {

using metrics::ProcessMetrics;

namespace {

using gecd::internal::CorrectRequest;
using gecd::v1::CorrectResponse;

// The public service's method paths (gRPC keeps the pointers: static storage).
constexpr char kCorrectMethod[] = "/gecd.v1.GrammarCorrection/Correct";
constexpr char kCorrectStreamMethod[] = "/gecd.v1.GrammarCorrection/CorrectStream";
// The trailer that tells a refused client when to retry (gRPC's retry design, A6).
constexpr char kRetryPushbackKey[] = "grpc-retry-pushback-ms";
// Refusals answered at once above server.max_refusals_per_second before pacing starts: a burst
// of arrivals at an overloaded worker is refused together.
constexpr int kRefusalBurst = 100;
// Refusals answered at once per call admitted, and at least this many a second (see
// worker/refusal_pacer.h): the rate a storm's clients are slowed to. Outside a storm the
// allowance only decides whether a refusal goes now or up to kRefusalMaxWait later (at 3x
// overload a worker refuses about two calls per one it admits: three in four wait). At 4 per
// admitted call and a floor of 250 a second, a closed loop of 1,024 clients re-sending at once
// was refused ~1,000 times a second, and the pod served ~80% of its capacity (session 19); at 1,
// short sentences on the 2-core box, ~700 a second and 715-730 req/s, each held ~0.7 s; at a
// half, 790-820 req/s, held 1.2-1.3 s; at a quarter, 810-880, held up to 3.5 s (session 30).
constexpr double kRefusalsPerAdmitted = 0.5;
constexpr double kRefusalFloorPerSecond = 50;
// Over which the admitted rate is measured. Under overload admission opens in clumps, as a
// batch's sentences finish together, up to a second apart on short sentences: over one second
// the allowance swung between its floor and 4x the mean (session 19).
constexpr std::chrono::milliseconds kRefusalRateWindow{4000};
// Beyond the allowance a refusal waits at most this, unless this many wait: then the worker is
// in a refusal storm of clients that re-send at once, and they wait for the allowance (see
// worker/refusal_pacer.h). At 3x overload in an open loop a worker refuses ~300 calls a second,
// so about one waits 3 ms at a time; sixteen is over ten times that.
constexpr std::chrono::milliseconds kRefusalMaxWait{3};
constexpr size_t kRefusalStormHeld = 16;
// A storm whose held refusals, with the sentences admitted in flight, grew by kRefusalStormHeld
// or more in each of four such periods is an open loop's, not one of clients that re-send (see
// worker/refusal_pacer.h): left.
constexpr std::chrono::milliseconds kRefusalStormGrowthPeriod{250};
// Held refusals a storm sends together (see worker/refusal_pacer.h). Closed loops of 1,024
// short-sentence clients re-sending at once, on the 2-core box, three runs each: one at a time,
// the worker spent 181-195 us of CPU a call (4.5-5.4 context switches) and answered 741-772 a
// second in time; 16 at a time 124-147 us, 746-830; 32 108-129 us, 809-882; 64 114-121 us,
// 806-827 (session 31). At a busy pod's allowance (~400 a second) 32 go every ~80 ms, a small
// part of the second or more a held refusal waits anyway.
constexpr int kRefusalStormBatch = 32;
// A held refusal is answered this long (or a tenth of the time its call had left, if more)
// before its call's deadline, so that the client gets the refusal and its pushback rather than
// DEADLINE_EXCEEDED: room for the pacer's thread to wake, the answer to be written on a busy
// box, and the client's own clock, which started before the call reached the worker.
constexpr std::chrono::milliseconds kRefusalDeadlineMargin{50};
// The call metadata that sets the priority class of a call's sentences.
constexpr char kPriorityKey[] = "x-gecd-priority";
// A batch sentence without a sooner deadline is due this many objectives after it arrived.
constexpr int64_t kBatchHorizon = 10;
static_assert(std::string_view(gecd::v1::GrammarCorrection::service_full_name()) ==
              "gecd.v1.GrammarCorrection");

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// Code points of UTF-8 `text` (each byte that does not continue a sequence): as cheap as the
// length admission reads, so the character limit is enforced before a text is split.
size_t CodePoints(std::string_view text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

// Time left to `deadline`; AdmissionController::kNoDeadline when the call has none.
std::chrono::microseconds Budget(std::chrono::system_clock::time_point deadline) {
  if (deadline == std::chrono::system_clock::time_point::max()) {
    return AdmissionController::kNoDeadline;
  }
  return std::max(std::chrono::duration_cast<std::chrono::microseconds>(
                      deadline - std::chrono::system_clock::now()),
                  std::chrono::microseconds(0));
}

ProcessMetrics::ShedPriority ShedPriorityOf(AdmissionController::Priority priority) {
  return priority == AdmissionController::Priority::kBatch ? ProcessMetrics::kShedBatch
                                                           : ProcessMetrics::kShedInteractive;
}

ProcessMetrics::ShedReason ShedReasonOf(AdmissionController::Refusal refusal) {
  switch (refusal) {
    case AdmissionController::Refusal::kSlo:
    case AdmissionController::Refusal::kNoEstimate:
      return ProcessMetrics::kShedSlo;
    case AdmissionController::Refusal::kDeadline:
      return ProcessMetrics::kShedDeadline;
    default:
      return ProcessMetrics::kShedMaxInFlight;
  }
}

}  // namespace

// One Correct call. It deletes itself when gRPC is done with it.
class GrammarService::UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(GrammarService& service, grpc::CallbackServerContext* context,
            const CorrectRequest* request, CorrectResponse* response, std::string client)
      : service_(service), id_(service.NextId()), deadline_(context->deadline()) {
    service.Process(
        id_, *request, context->deadline(), PriorityOf(*context, *request), std::move(client),
        [this, context, response](const grpc::Status& status, CorrectResponse reply,
                                  std::chrono::milliseconds retry_after) {
          if (status.ok()) *response = std::move(reply);
          // gRPC's retry design: a client with a retry policy waits this long
          // before its next attempt instead of its own backoff.
          if (retry_after.count() > 0) {
            context->AddTrailingMetadata(kRetryPushbackKey, absl::StrCat(retry_after.count()));
          }
          Finish(status);
        });
  }

  // The client went away or the deadline passed: free the engine's work. The engine still
  // answers (CANCELLED), and that answer finishes the call.
  void OnCancel() override { service_.CancelText(id_, deadline_); }
  void OnDone() override { delete this; }

 private:
  GrammarService& service_;
  const uint64_t id_;
  const Deadline deadline_;
};

// One CorrectStream call: reads texts while fewer than options.stream_window are
// outstanding, writes each answer as it arrives (one write at a time, the rest queued), and
// finishes once the client has half-closed and everything is answered, or, when the worker
// drains, with UNAVAILABLE once what it had admitted is answered. A request with
// `stream_sentences` also has each sentence's answer written as it is done (Process runs them
// all before the text's final answer); they ride in their text's slot of the window, so what
// waits here stays bounded by the window's texts. gRPC operations are started only outside mu_,
// because a completion can run inline on the starting thread.
class GrammarService::StreamCall final
    : public grpc::ServerBidiReactor<CorrectRequest, CorrectResponse> {
 public:
  StreamCall(GrammarService& service, grpc::CallbackServerContext* context, std::string client)
      : service_(service), context_(context), client_(std::move(client)) {
    // Registered before taking mu_: StartDraining takes the service's lock, then ours.
    const bool draining = service_.AddStream(this);
    mu_.Lock();
    draining_ = draining_ || draining;
    Pump();
  }

  void OnReadDone(bool ok) override {
    mu_.Lock();
    read_outstanding_ = false;
    if (!ok || finished_) {
      reading_ = false;
      read_closed_ = true;
      Pump();
      return;
    }
    mu_.Unlock();
    const uint64_t id = service_.NextId();
    {
      MutexLock lock(&mu_);
      in_engine_.push_back(id);
    }
    SentenceAnswered sentence_answered;
    if (request_.stream_sentences()) {
      sentence_answered = [this](CorrectResponse answer) {
        QueueSentenceAnswer(std::move(answer));
      };
    }
    service_.Process(
        id, request_, context_->deadline(), PriorityOf(*context_, request_), client_,
        [this, id](const grpc::Status& status, CorrectResponse reply,
                   std::chrono::milliseconds retry_after) {
          if (retry_after.count() > 0) {
            reply.mutable_status()->set_retry_after_ms(static_cast<uint32_t>(retry_after.count()));
          }
          Answer(id, status, std::move(reply));
        },
        std::move(sentence_answered));
    // Only now is request_ free: an answer that arrived while Process was reading it must not
    // start the next read into the same buffer (the sentence would take the next one's id).
    mu_.Lock();
    reading_ = false;
    Pump();
  }

  void OnWriteDone(bool ok) override {
    mu_.Lock();
    writing_ = false;
    writing_final_ = false;
    if (!ok) Break();
    Pump();
  }

  void OnCancel() override {
    MutexLock lock(&mu_);
    Break();
  }

  void OnDone() override {
    service_.RemoveStream(this);
    delete this;
  }

  // The worker drains: read no more, and finish once the admitted sentences are answered.
  // Called under the service's streams_mu_, so it only decides; returns true when the caller
  // must call FinishDrained() (after releasing streams_mu_: OnDone takes it).
  bool StartDraining() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    draining_ = true;
    if (!MayFinishDraining()) return false;
    finished_ = true;
    return true;
  }
  void FinishDrained() { Finish(DrainedStatus()); }

 private:
  void Answer(uint64_t id, const grpc::Status& status, CorrectResponse reply) {
    if (!status.ok()) {
      reply.mutable_status()->set_code(status.error_code());
      reply.mutable_status()->set_message(status.error_message());
    }
    mu_.Lock();
    std::erase(in_engine_, id);
    if (!broken_) {
      pending_.push_back({.response = std::move(reply), .final = true});
      ++pending_finals_;
    }
    Pump();
  }

  // One sentence of a text still in in_engine_ (its final answer comes after).
  void QueueSentenceAnswer(CorrectResponse answer) {
    mu_.Lock();
    if (!broken_) pending_.push_back({.response = std::move(answer), .final = false});
    Pump();
  }

  // The stream can no longer deliver: drop queued answers and cancel the engine's work.
  // Releases mu_ while it cancels.
  void Break() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (broken_) return;
    broken_ = true;
    read_closed_ = true;
    pending_.clear();
    pending_finals_ = 0;
    const std::vector<uint64_t> ids = in_engine_;
    mu_.Unlock();
    for (uint64_t id : ids) service_.CancelText(id, context_->deadline());
    mu_.Lock();
  }

  // Texts read and not yet answered in full: what the window counts (sentence answers are
  // not texts).
  size_t Outstanding() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_engine_.size() + pending_finals_ + (writing_final_ ? 1 : 0);
  }
  // Nothing left to write: no text outstanding and no response queued or being written.
  bool AllWritten() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Outstanding() == 0 && pending_.empty() && !writing_;
  }
  // Draining, nothing left to answer, and no sentence being processed (a read still pending is
  // fine: Finish ends it).
  bool MayFinishDraining() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return draining_ && !finished_ && AllWritten() && (!reading_ || read_outstanding_);
  }
  static grpc::Status DrainedStatus() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down");
  }

  // Starts whatever the state allows: the next write, the next read, or the finish. Releases
  // mu_ before calling into gRPC.
  void Pump() ABSL_UNLOCK_FUNCTION(mu_) {
    bool write = false, read = false, finish = false;
    if (!writing_ && !pending_.empty() && !finished_) {
      writing_ = write = true;
      writing_response_ = std::move(pending_.front().response);
      writing_final_ = pending_.front().final;
      if (writing_final_) --pending_finals_;
      pending_.pop_front();
    }
    const size_t outstanding = Outstanding();
    if (!reading_ && !read_closed_ && !draining_ && !finished_ &&
        outstanding < static_cast<size_t>(service_.options_.stream_window)) {
      reading_ = read_outstanding_ = read = true;
    }
    grpc::Status status;
    if (read_closed_ && !reading_ && AllWritten() && !finished_) {
      finished_ = finish = true;
      status = broken_ ? grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled")
                       : grpc::Status::OK;
    } else if (MayFinishDraining()) {
      finished_ = finish = true;
      status = DrainedStatus();
    }
    mu_.Unlock();
    if (write) StartWrite(&writing_response_);
    if (read) StartRead(&request_);
    if (finish) Finish(status);
  }

  GrammarService& service_;
  grpc::CallbackServerContext* const context_;
  const std::string client_;  // its bearer token's name; "" without auth.tokens_file
  // The read in progress, then the sentence Process reads from it; reading_ covers both,
  // read_outstanding_ only the first.
  CorrectRequest request_;
  CorrectResponse writing_response_;  // the write in progress
  Mutex mu_;
  // ids submitted and not yet answered (few: the window)
  std::vector<uint64_t> in_engine_ ABSL_GUARDED_BY(mu_);
  // Answered, waiting for the write in progress: texts' final answers and sentence answers.
  struct Queued {
    CorrectResponse response;
    bool final = true;  // a text's final answer (false: a sentence answer)
  };
  std::deque<Queued> pending_ ABSL_GUARDED_BY(mu_);
  size_t pending_finals_ ABSL_GUARDED_BY(mu_) = 0;  // final answers in pending_
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool read_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_final_ ABSL_GUARDED_BY(mu_) = false;  // the write in progress is a final answer
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

GrammarService::GrammarService(const config::Config& config, const model::Tokenizer& tokenizer,
                               text::PromptBuilder prompts, sentences::SentenceSplitter splitter,
                               EngineLink& engine, ProcessMetrics& metrics, Options options)
    : tokenizer_(tokenizer),
      engine_(engine),
      metrics_(metrics),
      options_(options),
      prompts_(std::move(prompts)),
      splitter_(std::move(splitter)),
      cache_fingerprint_(SentenceCache::Fingerprint(config)),
      max_input_chars_(static_cast<size_t>(config.server.max_input_chars)),
      spelling_budget_(config.spelling.budget_ms),
      slo_(config.server.slo_p99_ms),
      model_max_output_tokens_(static_cast<uint32_t>(config.model.max_output_tokens)),
      admission_({.max_in_flight = config.server.max_in_flight,
                  .slo = slo_,
                  .max_batch_size = config.engine.max_batch_size,
                  .engine_load = [&engine] { return engine.Load(); },
                  .publish_in_flight = [&engine](int n) { engine.PublishAdmitted(n); },
                  .shared_margin = engine.SharedAdmissionMargin()},
                 options.admission_clock ? options.admission_clock : MonotonicMicros),
      cache_(static_cast<size_t>(config.server.sentence_cache_mb) << 20),
      pacer_metrics_(metrics),
      refusal_pacer_(
          {.max_per_second = static_cast<double>(config.server.max_refusals_per_second),
           .burst = kRefusalBurst,
           .per_admitted = kRefusalsPerAdmitted,
           .floor_per_second = kRefusalFloorPerSecond,
           .rate_window = kRefusalRateWindow,
           .max_wait = kRefusalMaxWait,
           .storm_held = kRefusalStormHeld,
           .storm_growth_period = kRefusalStormGrowthPeriod,
           .storm_batch = kRefusalStormBatch,
           .admitted_in_flight = [this] { return static_cast<size_t>(admission_.in_flight()); },
           .observer = &pacer_metrics_}),
      // As many starts at once as the spelling stage has look-ups: more would wait for it.
      start_queue_(config.spelling.instances),
      waiting_room_(static_cast<size_t>(config.server.max_in_flight)) {
  // As the generated gecd::v1::GrammarCorrection::CallbackService does, with our request type.
  AddMethod(new grpc::internal::RpcServiceMethod(kCorrectMethod,
                                                 grpc::internal::RpcMethod::NORMAL_RPC, nullptr));
  MarkMethodCallback(
      0, new grpc::internal::CallbackUnaryHandler<CorrectRequest, CorrectResponse>(
             [this](grpc::CallbackServerContext* context, const CorrectRequest* request,
                    CorrectResponse* response) { return Correct(context, request, response); }));
  AddMethod(new grpc::internal::RpcServiceMethod(
      kCorrectStreamMethod, grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
  MarkMethodCallback(
      1, new grpc::internal::CallbackBidiHandler<CorrectRequest, CorrectResponse>(
             [this](grpc::CallbackServerContext* context) { return CorrectStream(context); }));
}

GrammarService::~GrammarService() {
  // Queued starts submit to the engine link, handing it callbacks.
  start_queue_.Stop();
  engine_callbacks_.WaitForNone();
}

grpc::ServerUnaryReactor* GrammarService::Correct(grpc::CallbackServerContext* context,
                                                  const CorrectRequest* request,
                                                  CorrectResponse* response) {
  last_call_us_.store(MonotonicMicros(), std::memory_order_relaxed);
  absl::StatusOr<std::string> client = Authenticate(*context);
  if (!client.ok()) {
    grpc::ServerUnaryReactor* refused = context->DefaultReactor();
    refused->Finish(ToGrpc(client.status()));
    return refused;
  }
  return new UnaryCall(*this, context, request, response, *std::move(client));
}

namespace {

// A CorrectStream call refused before it starts (no valid bearer token). Deletes itself.
class RefusedStream final : public grpc::ServerBidiReactor<CorrectRequest, CorrectResponse> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerBidiReactor<CorrectRequest, CorrectResponse>* GrammarService::CorrectStream(
    grpc::CallbackServerContext* context) {
  last_call_us_.store(MonotonicMicros(), std::memory_order_relaxed);
  absl::StatusOr<std::string> client = Authenticate(*context);
  if (!client.ok()) return new RefusedStream(ToGrpc(client.status()));
  return new StreamCall(*this, context, *std::move(client));
}

absl::StatusOr<std::string> GrammarService::Authenticate(
    const grpc::CallbackServerContext& context) {
  if (options_.tokens == nullptr) return std::string();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  absl::StatusOr<std::string> client = options_.tokens->Authenticate(
      it == metadata.end() ? std::string_view()
                           : std::string_view(it->second.data(), it->second.size()));
  if (!client.ok()) {
    // Counted and logged like any answer, without a name (and never with the token).
    metrics_.RequestFinished(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED), 0);
    spdlog::debug("call from {} refused: {}", context.peer(),
                  std::string(client.status().message()));
  }
  return client;
}

bool GrammarService::AddStream(StreamCall* stream) {
  MutexLock lock(&streams_mu_);
  streams_.insert(stream);
  metrics_.StreamOpened();
  return draining_.load(std::memory_order_relaxed);
}

void GrammarService::RemoveStream(StreamCall* stream) {
  MutexLock lock(&streams_mu_);
  streams_.erase(stream);
  metrics_.StreamClosed();
}

int GrammarService::open_streams() const {
  MutexLock lock(&streams_mu_);
  return static_cast<int>(streams_.size());
}

void GrammarService::StartDraining() {
  draining_.store(true, std::memory_order_relaxed);
  // Batch sentences still waiting have not started: the client sends them elsewhere.
  waiting_room_.Close(absl::UnavailableError("server is shutting down"));
  // A stream marked finished here cannot reach OnDone (which needs streams_mu_) before its
  // Finish below: gRPC ends a call only after Finish.
  std::vector<StreamCall*> finish;
  {
    MutexLock lock(&streams_mu_);
    for (StreamCall* stream : streams_) {
      if (stream->StartDraining()) finish.push_back(stream);
    }
  }
  for (StreamCall* stream : finish) stream->FinishDrained();
}

void GrammarService::Release(const AdmissionController::Ticket& ticket, int output_tokens) {
  const double ratio = admission_.Release(ticket, output_tokens);
  if (ratio > 0) metrics_.ObservePredictionRatio(ratio);
  metrics_.RequestReleased();
  waiting_room_.Poke();  // room for a batch sentence, perhaps
}

absl::StatusOr<AdmissionController::Priority> GrammarService::PriorityOf(
    const grpc::CallbackServerContext& context, const CorrectRequest& request) {
  absl::string_view value(request.priority().data(), request.priority().size());
  absl::string_view source = "the request's priority field";
  if (value.empty()) {
    const auto& metadata = context.client_metadata();
    const auto it = metadata.find(kPriorityKey);
    if (it == metadata.end()) return AdmissionController::Priority::kInteractive;
    value = absl::string_view(it->second.data(), it->second.size());
    source = "the x-gecd-priority metadata";
  }
  if (value == "interactive") return AdmissionController::Priority::kInteractive;
  if (value == "batch") return AdmissionController::Priority::kBatch;
  return absl::InvalidArgumentError(absl::StrCat("priority '", absl::CHexEscape(value), "' (",
                                                 source, ") is not one of: interactive, batch"));
}

absl::StatusOr<text::OffsetUnit> GrammarService::OffsetUnitOf(const CorrectRequest& request) {
  switch (request.offset_unit()) {
    case gecd::v1::OFFSET_UNIT_UTF8_BYTES:
      return text::OffsetUnit::kUtf8Bytes;
    case gecd::v1::OFFSET_UNIT_CODE_POINTS:
      return text::OffsetUnit::kCodePoints;
    case gecd::v1::OFFSET_UNIT_UTF16_CODE_UNITS:
      return text::OffsetUnit::kUtf16CodeUnits;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("offset_unit ", request.offset_unit(),
                       " is not one of: 0 (OFFSET_UNIT_UTF8_BYTES), 1 (OFFSET_UNIT_CODE_POINTS), "
                       "2 (OFFSET_UNIT_UTF16_CODE_UNITS)"));
  }
}

// A text in flight: what its sentences share and what they answered. Held by its sentences'
// callbacks (and texts_ while any runs); the last sentence to finish assembles the answer.
struct GrammarService::Text {
  uint64_t id = 0;
  std::string text;  // the request's, owned: its sentences outlive the request message
  std::vector<sentences::SentenceSpan> spans;
  text::OffsetUnit unit = text::OffsetUnit::kUtf8Bytes;
  bool cache = true;       // the request allows the sentence cache
  int max_new_tokens = 0;  // the output cap, part of the cache's key
  Deadline deadline;
  TextDone reply;
  // CorrectStream's `stream_sentences`: each sentence's answer as it is done; null: none.
  SentenceAnswered sentence_answered;
  // Made once, by the first sentence answer: whether the whole text passes CheckText (its
  // offsets can be converted), and then its offset converter.
  std::once_flag answerable_once;
  std::optional<text::OffsetConverter> offsets;
  Mutex mu;
  std::vector<SentenceOutcome> outcomes ABSL_GUARDED_BY(mu);
  std::vector<bool> running ABSL_GUARDED_BY(mu);  // submitted and not yet answered
  size_t pending ABSL_GUARDED_BY(mu) = 0;         // sentences not yet answered
  bool failed ABSL_GUARDED_BY(mu) = false;
  grpc::Status failure ABSL_GUARDED_BY(mu);  // the first sentence's failure
  std::chrono::milliseconds retry_after ABSL_GUARDED_BY(mu){0};

  std::string_view Sentence(size_t i) const {
    return std::string_view(text).substr(spans[i].begin, spans[i].end - spans[i].begin);
  }
  std::vector<size_t> Running() ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    std::vector<size_t> indices;
    for (size_t i = 0; i < running.size(); ++i) {
      if (running[i]) indices.push_back(i);
    }
    return indices;
  }
  bool Failed() ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    return failed;
  }
};

void GrammarService::CancelText(uint64_t id, Deadline deadline) {
  std::shared_ptr<Text> text;
  {
    MutexLock lock(&texts_mu_);
    const auto it = texts_.find(id);
    if (it == texts_.end()) return;
    text = it->second;
  }
  CancelSentences(*text, deadline);
}

void GrammarService::CancelSentences(Text& text, Deadline deadline) {
  const bool expired = std::chrono::system_clock::now() >= deadline;
  for (size_t i : text.Running()) {
    const uint64_t id = SentenceId(text.id, i);
    // A refused text whose refusal waits in the pacer is answered now, all of it.
    if (refusal_pacer_.Cancel(id)) return;
    // One still waiting for room or for its start is answered here; one started, by the
    // engine.
    const absl::Status status = expired ? absl::DeadlineExceededError("deadline exceeded")
                                        : absl::CancelledError("cancelled");
    if (waiting_room_.Cancel(id, status) || start_queue_.Cancel(id, status)) continue;
    engine_.Cancel(id);
  }
}

void GrammarService::Process(uint64_t id, const CorrectRequest& request, Deadline deadline,
                             absl::StatusOr<AdmissionController::Priority> priority,
                             std::string client, TextDone done,
                             SentenceAnswered sentence_answered) {
  const int64_t arrival_us = MonotonicMicros();
  // The objective an OK answer must meet to count as goodput: the SLO, or the deadline if sooner.
  const std::chrono::microseconds budget = Budget(deadline);
  const auto objective_us = std::min<int64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(slo_).count(), budget.count());
  // Every outcome, refused or answered, is counted once and logged with both ids.
  TextDone reply = [this, id, arrival_us, objective_us, done = std::move(done),
                    client = std::move(client), client_id = request.request_id()](
                       const grpc::Status& status, CorrectResponse response,
                       std::chrono::milliseconds retry_after) {
    const int64_t elapsed_us = MonotonicMicros() - arrival_us;
    const double seconds = static_cast<double>(elapsed_us) * 1e-6;
    metrics_.RequestFinished(status.error_code(), seconds);
    if (!client.empty()) metrics_.ClientRequestFinished(client, status.error_code());
    // The access log: the engine's id, the client's request id and, with auth.tokens_file,
    // the name of the caller's token.
    if (status.ok()) {
      if (elapsed_us <= objective_us) metrics_.RequestWithinObjective();
      spdlog::debug(
          "request {} ({}{}{}): ok, {} sentences, {} prompt + {} output tokens, {:.1f} ms", id,
          client_id, client.empty() ? "" : ", client ", client, response.sentences_size(),
          response.prompt_tokens(), response.output_tokens(), seconds * 1e3);
    } else {
      spdlog::debug("request {} ({}{}{}): {} {}", id, client_id, client.empty() ? "" : ", client ",
                    client, static_cast<int>(status.error_code()), status.error_message());
    }
    response.set_request_id(client_id);
    done(status, std::move(response), retry_after);
  };

  if (draining_.load(std::memory_order_relaxed)) {
    reply(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down"), {}, {});
    return;
  }
  if (!priority.ok()) {
    reply(ToGrpc(priority.status()), {}, {});
    return;
  }
  absl::StatusOr<text::OffsetUnit> unit = OffsetUnitOf(request);
  if (!unit.ok()) {
    reply(ToGrpc(unit.status()), {}, {});
    return;
  }
  // A text over the character limit is never split (CheckText names the limit, or an earlier
  // fault).
  if (CodePoints(request.text()) > max_input_chars_) {
    reply(ToGrpc(prompts_.CheckText(request.text())), {}, {});
    return;
  }
  const uint32_t max_output_tokens = request.max_output_tokens();
  auto text = std::make_shared<Text>();
  text->id = id;
  text->text = request.text();
  text->spans = splitter_.Split(text->text);
  text->unit = *unit;
  text->cache = (!request.has_cache() || request.cache()) && cache_.max_bytes() > 0;
  // What the engine will generate at most: the request's cap within the model's.
  text->max_new_tokens = static_cast<int>(
      max_output_tokens == 0 ? model_max_output_tokens_
                             : std::min<uint32_t>(max_output_tokens, model_max_output_tokens_));
  text->deadline = deadline;
  text->reply = std::move(reply);
  if (sentence_answered) {
    text->sentence_answered = [client_id = request.request_id(),
                               answered = std::move(sentence_answered)](CorrectResponse response) {
      response.set_request_id(client_id);
      answered(std::move(response));
    };
  }
  const size_t n = text->spans.size();
  std::vector<size_t> misses;
  {
    MutexLock lock(&text->mu);
    text->outcomes.resize(n);
    text->running.assign(n, false);
    for (size_t i = 0; i < n; ++i) {
      std::optional<CachedSentence> hit;
      if (text->cache) {
        hit = cache_.Get(cache_fingerprint_, text->max_new_tokens, text->Sentence(i));
        if (hit) {
          metrics_.SentenceCacheHit();
        } else {
          metrics_.SentenceCacheMiss();
        }
      }
      if (hit) {
        text->outcomes[i] = {.corrected = std::move(hit->corrected),
                             .cached = true,
                             .prompt_tokens = 0,
                             .output_tokens = 0};
      } else {
        misses.push_back(i);
        text->running[i] = true;
      }
    }
    text->pending = misses.size();
  }
  // A cached sentence is done now: answered before any other can be (and before the text).
  if (text->sentence_answered && misses.size() < n) {
    std::vector<SentenceOutcome> cached;
    {
      MutexLock lock(&text->mu);
      cached = text->outcomes;
    }
    size_t next_miss = 0;
    for (size_t i = 0; i < n; ++i) {
      if (next_miss < misses.size() && misses[next_miss] == i) {
        ++next_miss;
        continue;
      }
      AnswerSentenceOf(*text, i, cached[i]);
    }
  }
  if (misses.empty()) {  // only whitespace, or every sentence cached
    FinishText(*text);
    return;
  }
  {
    MutexLock lock(&texts_mu_);
    texts_.emplace(id, text);
  }
  ProcessSentences(text, std::move(misses), max_output_tokens, deadline, *priority);
}

void GrammarService::SentenceFinished(const std::shared_ptr<Text>& text, size_t index,
                                      const grpc::Status& status, SentenceOutcome outcome,
                                      std::chrono::milliseconds retry_after) {
  if (status.ok() && text->cache && outcome.cacheable) {
    cache_.Put(cache_fingerprint_, text->max_new_tokens, text->Sentence(index),
               {.corrected = outcome.corrected,
                .prompt_tokens = outcome.prompt_tokens,
                .output_tokens = outcome.output_tokens});
  }
  // A sentence answer goes out before this sentence stops counting as pending, so the text's
  // final answer (sent by the last one) always comes after it; none once the text has failed.
  std::optional<SentenceOutcome> answer;
  if (status.ok() && text->sentence_answered && !text->Failed()) answer = outcome;
  bool first_failure = false, last = false;
  {
    MutexLock lock(&text->mu);
    text->running[index] = false;
    if (status.ok()) {
      text->outcomes[index] = std::move(outcome);
    } else if (!text->failed) {
      text->failed = first_failure = true;
      text->failure = status;
      text->retry_after = retry_after;
    }
    if (text->failed) answer.reset();
    if (!answer) last = --text->pending == 0;
  }
  if (answer) {
    AnswerSentenceOf(*text, index, *answer);
    MutexLock lock(&text->mu);
    last = --text->pending == 0;
  }
  if (first_failure) CancelSentences(*text, text->deadline);
  if (!last) return;
  {
    MutexLock lock(&texts_mu_);
    texts_.erase(text->id);
  }
  FinishText(*text);
}

void GrammarService::AnswerSentenceOf(Text& text, size_t index, const SentenceOutcome& outcome) {
  // Only a text that passes the whole text's checks is answered in parts: its final answer
  // would otherwise be INVALID_ARGUMENT, and its offsets cannot be converted.
  std::call_once(text.answerable_once, [this, &text] {
    if (prompts_.CheckText(text.text).ok()) text.offsets.emplace(text.text, text.unit);
  });
  if (!text.offsets) return;
  CorrectResponse response;
  *response.mutable_sentence_answer() =
      AnswerSentence(text.text, text.spans, index, outcome, *text.offsets);
  text.sentence_answered(std::move(response));
}

void GrammarService::FinishText(Text& text) {
  std::vector<SentenceOutcome> outcomes;
  grpc::Status failure;
  std::chrono::milliseconds retry_after{0};
  {
    MutexLock lock(&text.mu);
    outcomes = std::move(text.outcomes);
    if (text.failed) {
      failure = text.failure;
      retry_after = text.retry_after;
    }
  }
  // The whole text's checks (the sentences were checked one by one; this names the fault's
  // byte in the text, and covers what lies between sentences).
  if (absl::Status checked = prompts_.CheckText(text.text);
      !checked.ok() &&
      (failure.ok() || failure.error_code() == grpc::StatusCode::INVALID_ARGUMENT)) {
    text.reply(ToGrpc(checked), {}, {});
    return;
  }
  if (!failure.ok()) {
    text.reply(failure, {}, retry_after);
    return;
  }
  text.reply(grpc::Status::OK, AssembleAnswer(text.text, text.spans, outcomes, text.unit), {});
}

void GrammarService::ProcessSentences(const std::shared_ptr<Text>& text,
                                      std::vector<size_t> indices, uint32_t max_output_tokens,
                                      Deadline deadline, AdmissionController::Priority klass) {
  const int64_t arrival_us = MonotonicMicros();
  const std::chrono::microseconds budget = Budget(deadline);
  const auto objective_us = std::min<int64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(slo_).count(), budget.count());
  // What the engine will generate at most: the request's cap within the model's.
  const int output_cap = static_cast<int>(
      max_output_tokens == 0 ? model_max_output_tokens_
                             : std::min<uint32_t>(max_output_tokens, model_max_output_tokens_));
  // Admission first, on the sentences' lengths alone, so that a refusal costs no validation,
  // tokenization or spelling: under overload refusals are most of the calls. Batch sentences
  // keep their own deadline (they wait for room); interactive ones are held to the objective.
  // The engine's waiting queue runs earliest due first. An interactive sentence is due by its
  // objective; a batch one by its deadline, and at most kBatchHorizon after it arrived, so that
  // however long it waited for room it is not passed over by later sentences for ever.
  const SentenceTimes times{
      .arrival_us = arrival_us,
      .due_us = arrival_us + (klass == AdmissionController::Priority::kBatch
                                  ? std::min<int64_t>(budget.count(), kBatchHorizon * objective_us)
                                  : objective_us),
      .deadline_us = budget == AdmissionController::kNoDeadline ? 0 : arrival_us + budget.count()};
  std::vector<size_t> bytes;
  bytes.reserve(indices.size());
  for (size_t i : indices) bytes.push_back(text->Sentence(i).size());
  auto admit = [this, klass, deadline, output_cap, bytes = std::move(bytes)] {
    return admission_.Admit(klass == AdmissionController::Priority::kBatch
                                ? AdmissionController::kNoDeadline
                                : Budget(deadline),
                            bytes, output_cap, klass);
  };
  // Each sentence's end, exactly once.
  auto finish = [this, text](size_t i) {
    return [this, text, i](const grpc::Status& status, SentenceOutcome outcome,
                           std::chrono::milliseconds retry_after) {
      SentenceFinished(text, i, status, std::move(outcome), retry_after);
    };
  };
  // Admitted sentences start on the start queue's thread, so that this call's handler returns
  // now and gRPC reads the next calls of its connection (see worker/start_queue.h).
  auto start = [this, text, indices, finish, max_output_tokens, deadline,
                times](const AdmissionController::Decision& admitted) {
    refusal_pacer_.Admitted();
    for (size_t j = 0; j < indices.size(); ++j) {
      const size_t i = indices[j];
      const uint64_t id = SentenceId(text->id, i);
      // A sentence that will not start gives its admission back and is answered with why.
      auto not_started = [this, ticket = admitted.tickets[j],
                          done = finish(i)](absl::Status status) {
        admission_.Release(ticket, -1);
        done(ToGrpc(status), {}, {});
      };
      start_queue_.Push({.id = id,
                         .start =
                             [this, text, i, id, max_output_tokens, deadline, times,
                              ticket = admitted.tickets[j], done = finish(i), not_started] {
                               // Once one sentence failed the text has failed: the rest are not
                               // started.
                               if (text->Failed()) {
                                 not_started(absl::CancelledError("another sentence failed"));
                                 return;
                               }
                               Start(id, text->Sentence(i), max_output_tokens, deadline, times,
                                     ticket, done);
                             },
                         .fail = std::move(not_started)});
    }
  };
  auto fail_all = [indices, finish](const grpc::Status& status,
                                    std::chrono::milliseconds retry_after) {
    for (size_t i : indices) finish(i)(status, {}, retry_after);
  };
  // Whether a text that was not admitted waits in the waiting room rather than being refused:
  // the batch class always, any class while admission has nothing to predict from.
  auto waits = [klass](const AdmissionController::Decision& d) {
    return klass == AdmissionController::Priority::kBatch ||
           d.refusal == AdmissionController::Refusal::kNoEstimate;
  };
  // Held by the pacer under the first sentence's id, which CancelSentences tries first, and
  // at most until a little before the call's deadline.
  auto refuse = [this, klass, fail_all, deadline,
                 key = SentenceId(text->id, indices.front())](AdmissionController::Decision& d) {
    metrics_.RequestShed(ShedReasonOf(d.refusal), ShedPriorityOf(klass));
    const std::chrono::microseconds budget = Budget(deadline);
    const auto due =
        budget == AdmissionController::kNoDeadline
            ? RefusalPacer::Clock::time_point::max()
            : RefusalPacer::Clock::now() + budget -
                  std::max<std::chrono::microseconds>(kRefusalDeadlineMargin, budget / 10);
    refusal_pacer_.Refuse(
        [fail_all, message = std::move(d.message), retry_after = d.retry_after] {
          fail_all(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, message), retry_after);
        },
        due, key);
  };
  AdmissionController::Decision admitted = admit();
  if (admitted.admitted()) {
    start(admitted);
  } else if (!waits(admitted)) {
    refuse(admitted);
  } else {
    // It waits under its first sentence's id, which CancelSentences tries first.
    waiting_room_.Push({.id = SentenceId(text->id, indices.front()),
                        .try_start =
                            [admit, start, waits, refuse] {
                              AdmissionController::Decision admitted = admit();
                              if (admitted.admitted()) {
                                start(admitted);
                              } else if (waits(admitted)) {
                                return false;
                              } else {
                                refuse(admitted);
                              }
                              return true;
                            },
                        .fail =
                            [this, klass, fail_all](absl::Status status) {
                              if (status.code() == absl::StatusCode::kResourceExhausted) {
                                metrics_.RequestShed(ProcessMetrics::kShedMaxInFlight,
                                                     ShedPriorityOf(klass));
                              }
                              fail_all(ToGrpc(status), {});
                            }});
  }
}

void GrammarService::Start(uint64_t id, std::string_view text, uint32_t max_output_tokens,
                           Deadline deadline, const SentenceTimes& times,
                           const AdmissionController::Ticket& ticket, const SentenceDone& reply) {
  // A sentence over model.max_input_tokens is answered as written (flagged), not refused: one
  // long sentence must not fail the whole text.
  absl::StatusOr<text::CheckedText> checked =
      prompts_.Check(text, max_output_tokens, text::PromptBuilder::OverTokenLimit::kUnchanged);
  if (!checked.ok()) {
    admission_.Release(ticket, -1);
    reply(ToGrpc(checked.status()), {}, {});
    return;
  }
  if (checked->unchanged) {
    admission_.Release(ticket, -1);
    reply(grpc::Status::OK, {.corrected = std::string(text), .skipped = checked->over_token_limit},
          {});
    return;
  }
  metrics_.RequestAdmitted();
  const auto spelling_start = std::chrono::steady_clock::now();
  // No longer than the RPC has left: a look-up past its deadline is wasted.
  const auto left = std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::max(
      deadline - std::chrono::system_clock::now(), std::chrono::system_clock::duration::zero()));
  model::SpellCorrector::Budget budget;
  budget.deadline =
      spelling_start + std::min<std::chrono::steady_clock::duration>(spelling_budget_, left);
  absl::StatusOr<text::Prompt> prompt = prompts_.Build(*checked, budget);
  if (options_.spelling != nullptr) {
    const int lookups = prompt.ok() ? prompt->spelling.lookups : 0;
    const int skipped = prompt.ok() ? prompt->spelling.skipped : 0;
    metrics_.ObserveSpelling(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - spelling_start).count(),
        lookups, skipped);
  }
  if (!prompt.ok()) {  // the spelling stage's text is over model.max_input_tokens
    Release(ticket, -1);
    reply(grpc::Status::OK, {.corrected = std::string(text), .skipped = true}, {});
    return;
  }
  const auto prompt_tokens = static_cast<uint32_t>(prompt->tokens.size());
  // An answer that depends on the spelling stage's time budget is not kept for later.
  const bool cacheable = prompt->spelling.skipped == 0;
  EngineRequest engine_request{.id = id,
                               .prompt = std::move(prompt->tokens),
                               .max_new_tokens = prompt->params.max_new_tokens,
                               .copy_bias = prompt->params.copy_bias,
                               .copy_begin = prompt->params.copy_begin,
                               .copy_end = prompt->params.copy_end,
                               .arrival_us = times.arrival_us,
                               .due_us = times.due_us,
                               .deadline_us = times.deadline_us};
  // The engine thread does the reply's CPU work (detokenize, diff), off gRPC's threads.
  absl::Status submitted = engine_.Submit(
      std::move(engine_request), [this, reply, deadline, prompt_tokens, ticket, cacheable,
                                  pending = engine_callbacks_.Start()](EngineReply engine_reply) {
        if (engine_reply.first_token_us > 0) {
          metrics_.ObserveTimeToFirstToken(static_cast<double>(engine_reply.first_token_us) * 1e-6);
        }
        if (!engine_reply.status.ok()) {
          grpc::Status status = ToGrpc(engine_reply.status);
          if (status.error_code() == grpc::StatusCode::CANCELLED &&
              std::chrono::system_clock::now() >= deadline) {
            status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded");
          }
          reply(status, {}, {});
          // A sentence its deadline cancelled was late: admission must count it so.
          Release(ticket, status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                              ? AdmissionController::kMissedDeadline
                              : -1);
          return;
        }
        // Released after the reply: the sentence counts in flight until its text's bookkeeping
        // is done, so a drain that waits for nothing in flight never destroys the service under
        // a reply still running.
        const int output_tokens = static_cast<int>(engine_reply.tokens.size());
        reply(grpc::Status::OK,
              {.corrected = text::OutputText(tokenizer_, engine_reply.tokens),
               .cacheable = cacheable,
               .prompt_tokens = prompt_tokens,
               .output_tokens = static_cast<uint32_t>(engine_reply.tokens.size()),
               .queue_us = static_cast<uint64_t>(engine_reply.queue_us),
               .engine_us = static_cast<uint64_t>(engine_reply.engine_us)},
              {});
        Release(ticket, output_tokens);
      });
  if (!submitted.ok()) {
    Release(ticket, -1);
    reply(ToGrpc(submitted), {}, {});
  }
}

}  // namespace gecd::worker
