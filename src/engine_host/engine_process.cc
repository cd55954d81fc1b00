#include "engine_host/engine_process.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/assert.h"
#include "common/monotonic_clock.h"
#include "common/startup_phases.h"
#include "common/status_macros.h"
#include "engine_host/generator.h"
#include "ipc/messages.h"
#include "spdlog/spdlog.h"
#include "supervisor/roles.h"

namespace gecd::engine_host {
namespace {

// SIGTERM and SIGINT: the first drains the engine, as the supervisor's draining flag does;
// a second exits at once. Drain() is async-signal-safe (an atomic store and a futex wake).
std::atomic<int> g_stop_signals{0};
std::atomic<EngineLoop*> g_loop{nullptr};

void OnStopSignal(int signal) {
  if (g_stop_signals.fetch_add(1) > 0) _exit(128 + signal);
  if (EngineLoop* loop = g_loop.load()) loop->Drain();
}

}  // namespace

absl::StatusOr<std::unique_ptr<EngineLoop>> EngineLoop::Create(const config::Config& config,
                                                               const ipc::SharedSegment& segment,
                                                               ipc::WaitOptions wait) {
  ASSIGN_OR_RETURN(std::unique_ptr<Generator> generator, MakeGenerator(config));
  return Create(std::move(generator), segment, wait);
}

absl::StatusOr<std::unique_ptr<EngineLoop>> EngineLoop::Create(std::unique_ptr<Generator> generator,
                                                               const ipc::SharedSegment& segment,
                                                               ipc::WaitOptions wait) {
  metrics::ProcessMetrics* metrics = metrics::MetricsRegion(segment.metrics_region())
                                         .ForProcess(metrics::MetricsRegion::kEngineIndex);
  if (metrics == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment ", segment.name(), " has no metrics block for the engine"));
  }
  return std::unique_ptr<EngineLoop>(new EngineLoop(segment, *metrics, std::move(generator), wait));
}

EngineLoop::EngineLoop(const ipc::SharedSegment& segment, metrics::ProcessMetrics& metrics,
                       std::unique_ptr<Generator> generator, ipc::WaitOptions wait)
    : segment_(segment),
      header_(segment.header()),
      metrics_(metrics),
      epoch_(segment.header()->engine_epoch.load(std::memory_order_acquire)),
      wait_(wait),
      generator_(std::move(generator)),
      endpoints_(segment.num_workers()),
      steps_before_publishing_(segment.step_time().known() ? kStepsBeforeReplacingALine : 0) {
  for (int i = 0; i < segment.num_workers(); ++i) {
    endpoints_[i].channel = segment.channel(i);
    AttachEndpoint(endpoints_[i]);
  }
}

EngineLoop::~EngineLoop() = default;

void EngineLoop::AttachEndpoint(Endpoint& endpoint) {
  endpoint.requests = ipc::RingConsumer(endpoint.channel.requests());
  endpoint.responses = ipc::RingProducer(endpoint.channel.responses());
}

absl::Status EngineLoop::Run() {
  header_->engine_ready_epoch.store(epoch_, std::memory_order_release);
  ProcessStartup().Mark("rings");
  spdlog::info("engine ready (epoch {}); start-up: {}", epoch_, ProcessStartup().Summary());
  const ipc::Doorbell doorbell = segment_.engine_doorbell();
  for (;;) {
    const uint64_t epoch = header_->engine_epoch.load(std::memory_order_acquire);
    if (epoch != epoch_) {
      return absl::FailedPreconditionError(
          absl::StrCat("engine epoch ", epoch_, " superseded by ", epoch));
    }
    TakeArrivals();
    PublishHasWork();  // before the step: one that never returns leaves it set
    if (generator_->HasWork()) RETURN_IF_ERROR(RunStep());
    generator_->PublishGauges(metrics_);
    SendReplies();
    PublishHasWork();
    if (generator_->HasWork()) continue;
    const bool draining = header_->draining.load(std::memory_order_acquire) != 0 ||
                          drain_requested_.load(std::memory_order_acquire);
    const bool replies_pending = RepliesPending();
    if (draining && sequences_.empty() && !replies_pending) return absl::OkStatus();
    // A worker that does not read its replies is retried every millisecond; otherwise sleep
    // until a worker rings, and look at the epoch and draining flags now and then.
    ipc::WaitOptions wait = wait_;
    if (replies_pending)
      wait.timeout = std::min<std::chrono::nanoseconds>(wait.timeout, std::chrono::milliseconds(1));
    doorbell.Wait(
        [&] {
          return HasRequests() ||
                 (!draining && (header_->draining.load(std::memory_order_relaxed) != 0 ||
                                drain_requested_.load(std::memory_order_relaxed))) ||
                 header_->engine_epoch.load(std::memory_order_relaxed) != epoch_;
        },
        wait);
  }
}

void EngineLoop::Drain() {
  drain_requested_.store(true, std::memory_order_release);
  segment_.engine_doorbell().Ring();
}

bool EngineLoop::HasRequests() const {
  for (const Endpoint& e : endpoints_) {
    if (e.requests.HasMessage() || e.channel.ResetPending()) return true;
  }
  return false;
}

bool EngineLoop::RepliesPending() const {
  return std::any_of(endpoints_.begin(), endpoints_.end(),
                     [](const Endpoint& e) { return !e.outbox.empty(); });
}

void EngineLoop::ResetDeadChannels() {
  for (int w = 0; w < static_cast<int>(endpoints_.size()); ++w) {
    Endpoint& e = endpoints_[w];
    if (!e.channel.ResetPending()) continue;
    for (const auto& [request_id, id] : e.live) {
      generator_->Free(id);
      sequences_.erase(id);
      outputs_.Take(id);  // nobody is left to answer
      metrics_.SequenceCancelled();
    }
    spdlog::info("worker {} restarted: dropped its {} requests, reset its rings", w, e.live.size());
    e.live.clear();
    e.outbox.clear();
    e.channel.CompleteReset();
    AttachEndpoint(e);
  }
}

void EngineLoop::TakeArrivals() {
  ResetDeadChannels();
  DrainRequests();
}

void EngineLoop::DrainRequests() {
  for (int w = 0; w < static_cast<int>(endpoints_.size()); ++w) {
    Endpoint& e = endpoints_[w];
    for (std::span<const uint8_t> message = e.requests.Peek(); !message.empty();
         message = e.requests.Peek()) {
      ipc::MessageReader reader(message);
      ipc::Record record;
      for (;;) {
        absl::StatusOr<bool> more = reader.Next(&record);
        if (!more.ok()) {
          spdlog::error("request ring of worker {}: {}", w, more.status().ToString());
          break;
        }
        if (!*more) break;
        if (auto* submit = std::get_if<ipc::SubmitRecord>(&record)) {
          Admit(w, std::move(*submit));
        } else if (auto* cancel = std::get_if<ipc::CancelRecord>(&record)) {
          CancelRequest(w, *cancel);
        } else {
          spdlog::error("request ring of worker {}: a DONE record", w);
        }
      }
      e.requests.Release();
    }
  }
}

void EngineLoop::Admit(int worker, ipc::SubmitRecord record) {
  // Left over from the engine before this one: its worker has failed it already.
  if (record.epoch != epoch_) return;
  Endpoint& e = endpoints_[worker];
  if (e.live.contains(record.id)) {
    spdlog::error("worker {} submitted request {} twice; ignoring the second", worker, record.id);
    return;
  }
  const engine::SequenceId id = next_id_++;
  const size_t prompt_tokens = record.tokens.size();
  sequences_[id] = Sequence{.worker = worker,
                            .request_id = record.id,
                            .arrival_us = record.arrival_us,
                            .first_step_us = 0,
                            .first_token_us = 0};
  e.live.emplace(record.id, id);
  engine::GenerationParams params;
  params.max_new_tokens = record.max_new_tokens;
  params.copy_bias = record.copy_bias;
  params.copy_begin = record.copy_begin;
  params.copy_end = record.copy_end;
  params.due_us = record.due_us;
  params.deadline_us = record.deadline_us;
  const absl::Status added = generator_->Add(id, std::move(record.tokens), std::move(params));
  if (!added.ok()) {
    spdlog::debug("worker {} request {}: {}", worker, record.id, added.ToString());
    Reply(id, added.code(), std::string(added.message()));
    return;
  }
  metrics_.AddPromptTokens(prompt_tokens);
}

void EngineLoop::CancelRequest(int worker, const ipc::CancelRecord& record) {
  Endpoint& e = endpoints_[worker];
  if (record.epoch != epoch_) return;
  auto it = e.live.find(record.id);
  if (it == e.live.end()) return;  // finished already: its DONE is on the way
  generator_->Free(it->second);
  metrics_.SequenceCancelled();
  Reply(it->second, absl::StatusCode::kCancelled);
}

absl::Status EngineLoop::RunStep() {
  Generator::StepOutcome outcome;
  const int64_t start_us = MonotonicMicros();
  int64_t planned_us = start_us;  // when the step started now was planned
  RETURN_IF_ERROR(generator_->Step(&outcome, [&] {
    TakeArrivals();
    planned_us = MonotonicMicros();
  }));
  for (engine::SequenceId id : outcome.ran) {
    auto it = sequences_.find(id);
    if (it != sequences_.end() && it->second.first_step_us == 0)
      it->second.first_step_us = planned_us;
  }
  const int64_t committed_us = MonotonicMicros();
  double interval_sum_us = 0;
  int intervals = 0;
  for (const engine::StepEvent& event : outcome.events) {
    auto it = sequences_.find(event.id);
    if (it == sequences_.end()) continue;
    Sequence& seq = it->second;
    if (seq.first_token_us == 0) seq.first_token_us = committed_us;
    if (seq.last_token_us != committed_us) {  // its first event of this step
      if (seq.last_token_us != 0) {
        interval_sum_us += static_cast<double>(committed_us - seq.last_token_us);
        ++intervals;
      }
      seq.last_token_us = committed_us;
    }
    if (outputs_.Add(event)) Reply(event.id, absl::StatusCode::kOk);
  }
  for (engine::SequenceId id : outcome.expired) {
    metrics_.SequenceExpired();
    Reply(id, absl::StatusCode::kDeadlineExceeded,
          "the deadline passed while the request waited for the engine");
  }
  if (!outcome.ran.empty()) {
    metrics_.ObserveBatch(static_cast<int>(outcome.ran.size()),
                          static_cast<double>(committed_us - start_us) * 1e-6);
  }
  if (outcome.timed_sequences > 0) {
    step_time_.Observe(outcome.timed_sequences, outcome.timed_tokens,
                       static_cast<double>(committed_us - start_us));
    const ipc::StepTime fitted = step_time_.Fitted();
    metrics_.SetStepTime(fitted.fixed_us * 1e-6, fitted.per_sequence_us * 1e-6);
  }
  // Admission predicts a sentence's time as its steps times the time between two of its steps
  // with n sequences running. Without drafts that is one step of n decodes, which the step-time
  // fit tells; with them a step also verifies every sequence's drafts (up to
  // engine.speculate_tokens positions each, left out of the fit's decoding step as extra
  // positions), and admission fed the decoding step's time with speculation on admitted several
  // times what the engine could answer in time: goodput 0 under overload (session 13's bench).
  // So the time between a sequence's steps is measured as such, by the running count: the time
  // from the step that last gave a sequence tokens to this one, averaged over the sequences it
  // gave tokens (a sequence's first tokens, after its prefill, start its clock). Until a
  // sequence has had two such steps, the step-time fit stands in.
  if (intervals > 0) {
    sequence_step_.Observe(outcome.running, outcome.running, interval_sum_us / intervals);
  }
  // An engine that replaces one that died finds its predecessor's line in the segment, and
  // keeps it until its own rests on kStepsBeforeReplacingALine steps: its first steps prefill
  // every request re-sent to it at once, and a fit of such steps put the fixed part at 45-78 ms
  // where its predecessor's line had 0-3, so admission refused 38-80 of 2,744 calls at half of
  // find-max while the engine came back (session 34).
  if (steps_before_publishing_ > 0) --steps_before_publishing_;
  if ((outcome.timed_sequences > 0 || intervals > 0) && steps_before_publishing_ == 0) {
    const ipc::StepTime between = sequence_step_.Fitted();
    segment_.PublishStepTime(between.known() ? between : step_time_.Fitted());
    segment_.PublishTokensPerStep(static_cast<float>(generator_->TokensPerSequenceStep()));
  }
  header_->engine_steps.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

void EngineLoop::PublishHasWork() {
  const bool has_work = generator_->HasWork();
  if (has_work == published_has_work_) return;  // a shared line: written on change only
  published_has_work_ = has_work;
  header_->engine_has_work.store(has_work ? 1 : 0, std::memory_order_release);
}

void EngineLoop::Reply(engine::SequenceId id, absl::StatusCode code, std::string message) {
  auto it = sequences_.find(id);
  // Every caller holds an id that Admit registered and only Reply erases.
  GECD_RELEASE_ASSERT(it != sequences_.end(), absl::StrCat("reply to unknown sequence ", id));
  Sequence& seq = it->second;
  const int64_t now_us = MonotonicMicros();
  ipc::DoneRecord record;
  record.id = seq.request_id;
  record.epoch = epoch_;
  record.status_code = static_cast<int32_t>(code);
  if (seq.first_step_us != 0) {
    record.queue_us = std::max<int64_t>(0, seq.first_step_us - seq.arrival_us);
    record.engine_us = now_us - seq.first_step_us;
  }
  if (seq.first_token_us != 0) {
    record.first_token_us = std::max<int64_t>(1, seq.first_token_us - seq.arrival_us);
  }
  record.tokens = outputs_.Take(id);
  record.message = std::move(message);
  endpoints_[seq.worker].live.erase(seq.request_id);
  QueueReply(seq.worker, std::move(record));
  sequences_.erase(it);
}

void EngineLoop::QueueReply(int worker, ipc::DoneRecord record) {
  Endpoint& e = endpoints_[worker];
  if (ipc::RecordBytes(record) > e.channel.responses().max_message_bytes()) {
    spdlog::error("worker {} request {}: {} tokens do not fit one ring message", worker, record.id,
                  record.tokens.size());
    record.status_code = static_cast<int32_t>(absl::StatusCode::kResourceExhausted);
    record.message = absl::StrCat(record.tokens.size(),
                                  " output tokens do not fit one response ring message "
                                  "(server.ring_slot_bytes)");
    record.tokens.clear();
  }
  // The smallest slots (server.ring_slot_bytes 256) hold less than kMaxDoneMessageBytes.
  const size_t room =
      e.channel.responses().max_message_bytes() - ipc::RecordBytes(ipc::DoneRecord{});
  if (record.message.size() > room) record.message.resize(room);
  metrics_.AddGeneratedTokens(record.tokens.size());
  e.outbox.push_back(std::move(record));
}

void EngineLoop::SendReplies() {
  for (Endpoint& e : endpoints_) {
    if (e.outbox.empty()) continue;
    size_t sent = 0;
    while (sent < e.outbox.size()) {
      const std::span<uint8_t> slot = e.responses.Reserve();
      if (slot.empty()) break;
      ipc::MessageWriter writer(slot);
      while (sent < e.outbox.size() && writer.Add(e.outbox[sent])) ++sent;
      e.responses.Commit(writer.size());
    }
    if (sent == 0) continue;
    e.outbox.erase(e.outbox.begin(), e.outbox.begin() + sent);
    e.responses.Publish();
    e.channel.responses().consumer_doorbell().Ring();
  }
}

int RunEngineProcess(const config::Config& config, const std::string& shm_name) {
  // A handler, not a blocked mask and sigwait: BLAS starts its threads before main, with the
  // signals unblocked, so a blocked mask would still let one of them take the default action.
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  absl::StatusOr<ipc::SharedSegment> segment = ipc::SharedSegment::Open(shm_name);
  if (!segment.ok()) {
    spdlog::critical("engine: {}", segment.status().ToString());
    return 1;
  }
  ProcessStartup().Mark("segment");
  absl::StatusOr<std::unique_ptr<EngineLoop>> loop = EngineLoop::Create(config, *segment);
  if (!loop.ok()) {
    spdlog::critical("engine: {}", loop.status().ToString());
    segment->SetEngineFailure(loop.status().ToString());  // the supervisor's reason to stop
    return 1;
  }
  g_loop.store(loop->get());
  if (g_stop_signals.load() > 0) (*loop)->Drain();  // it came while the model loaded
  const absl::Status status = (*loop)->Run();
  g_loop.store(nullptr);
  if (!status.ok()) {
    spdlog::error("engine: {}", status.ToString());
    return 1;
  }
  spdlog::info("engine: drained, exiting");
  return 0;
}

}  // namespace gecd::engine_host
