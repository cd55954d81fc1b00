#include "server/engine_process.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "config/engine_options.h"
#include "engine/cpu_backend.h"
#ifdef GECD_HAVE_CUDA
#include "engine/cuda_backend.h"
#endif
#include "ipc/messages.h"
#include "model/checkpoint.h"
#include "model/prompt_template.h"
#include "model/tokenizer.h"
#include "server/roles.h"
#include "spdlog/spdlog.h"

namespace gecd::server {
namespace {

int64_t NowUs() {
  // steady_clock is CLOCK_MONOTONIC, the clock workers stamp arrival_us with.
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// SIGTERM and SIGINT: the first drains the engine, as the supervisor's draining flag does;
// a second exits at once. Drain() is async-signal-safe (an atomic store and a futex wake).
std::atomic<int> g_stop_signals{0};
std::atomic<EngineLoop*> g_loop{nullptr};

void OnStopSignal(int signal) {
  if (g_stop_signals.fetch_add(1) > 0) _exit(128 + signal);
  if (EngineLoop* loop = g_loop.load()) loop->Drain();
}

}  // namespace

class Generator {
 public:
  // One step's outcome.
  struct StepOutcome {
    std::vector<engine::SequenceId> ran;
    std::vector<engine::StepEvent> events;
  };

  virtual ~Generator() = default;
  virtual absl::Status Add(engine::SequenceId id, std::vector<int32_t> prompt,
                           int max_new_tokens) = 0;
  // False when `id` is not live.
  virtual bool Free(engine::SequenceId id) = 0;
  virtual bool HasWork() const = 0;
  virtual absl::Status Step(StepOutcome* out) = 0;
  virtual void PublishGauges(ProcessMetrics& metrics) const = 0;
};

namespace {

// Runs Backend::Forward on its own thread, one step at a time, so the loop thread can commit
// step N and serve the rings while step N+1 computes. Counts the time the backend spends
// computing and the time it waits between back-to-back steps (the loop thread's share of the
// critical path), logged when it stops.
class ComputeThread {
 public:
  explicit ComputeThread(engine::Backend* backend)
      : backend_(backend), thread_([this] { Run(); }) {}
  ComputeThread(const ComputeThread&) = delete;
  ComputeThread& operator=(const ComputeThread&) = delete;

  // Finishes the step in flight, if any.
  ~ComputeThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    spdlog::info(
        "engine compute thread: {} steps, {:.3f} s computing, {:.3f} s idle between "
        "back-to-back steps ({:.1f} us a step)",
        steps_, busy_ns_ * 1e-9, gap_ns_ * 1e-9,
        back_to_back_ == 0 ? 0.0 : gap_ns_ * 1e-3 / back_to_back_);
  }

  // Starts Forward(*batch, result); both must stay untouched until Wait() returns. At most one
  // step is in flight. `back_to_back`: the previous step has just finished and this one was
  // ready for it, so the time in between counts as the backend waiting for the CPU.
  void Dispatch(const engine::StepBatch* batch, engine::StepResult* result, bool back_to_back) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      batch_ = batch;
      result_ = result;
      if (back_to_back) {
        gap_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - finished_at_)
                       .count();
        ++back_to_back_;
      }
    }
    cv_.notify_all();
  }

  // Blocks until the dispatched step is done; its status.
  absl::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return batch_ == nullptr; });
    return status_;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || batch_ != nullptr; });
      if (batch_ == nullptr) return;  // stopping, nothing in flight
      const engine::StepBatch* batch = batch_;
      engine::StepResult* result = result_;
      lock.unlock();
      const auto start = std::chrono::steady_clock::now();
      absl::Status status = backend_->Forward(*batch, result);
      const auto end = std::chrono::steady_clock::now();
      lock.lock();
      status_ = std::move(status);
      busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
      ++steps_;
      finished_at_ = end;
      batch_ = nullptr;
      cv_.notify_all();
    }
  }

  engine::Backend* const backend_;
  std::mutex mu_;
  std::condition_variable cv_;
  const engine::StepBatch* batch_ = nullptr;  // the step to run or running; null when idle
  engine::StepResult* result_ = nullptr;
  absl::Status status_;
  bool stop_ = false;
  std::chrono::steady_clock::time_point finished_at_;
  int64_t steps_ = 0;
  int64_t back_to_back_ = 0;
  int64_t busy_ns_ = 0;
  int64_t gap_ns_ = 0;
  std::thread thread_;  // last: starts once everything above is initialised
};

// engine.backend's model backend, sized and configured from the engine section.
absl::StatusOr<std::unique_ptr<engine::Backend>> CreateBackend(const config::Config& config,
                                                               const model::Checkpoint& checkpoint) {
  const config::EngineSection& e = config.engine;
  if (e.backend == "cuda") {
#ifdef GECD_HAVE_CUDA
    engine::CudaBackendOptions options;
    options.device = e.device;
    options.kv_cache_memory_fraction = e.kv_cache_memory_fraction;
    options.kv_block_size = e.kv_block_size;
    options.max_step_tokens = e.max_step_tokens;
    options.max_batch_size = e.max_batch_size;
    options.graph_batch_sizes = config::GraphBatchSizes(e);
    options.quantization = e.quantization == "fp8" ? engine::CudaBackendOptions::Quantization::kFp8
                                                   : engine::CudaBackendOptions::Quantization::kNone;
    options.attention_fp8 = e.attention_fp8;
    options.fp8_scaling = e.fp8_scaling == "per_tensor"
                              ? engine::CudaBackendOptions::Fp8Scaling::kPerTensor
                              : engine::CudaBackendOptions::Fp8Scaling::kPerChannel;
    ASSIGN_OR_RETURN(std::unique_ptr<engine::CudaBackend> cuda,
                     engine::CudaBackend::Create(checkpoint, options));
    return cuda;
#else
    return absl::FailedPreconditionError(
        "engine.backend: cuda, but this gecd was built without CUDA (no nvcc at build time)");
#endif
  }
  ASSIGN_OR_RETURN(std::unique_ptr<engine::CpuBackend> cpu,
                   engine::CpuBackend::Create(checkpoint, config::CpuBackendOptionsFrom(e)));
  return cpu;
}

// The Engine over a model backend, pipelined: each Step() plans step N+1 while step N
// computes, dispatches N+1 as soon as N is done, and only then commits N, so committing and
// the loop's ring I/O overlap with the backend.
class ModelGenerator final : public Generator {
 public:
  static absl::StatusOr<std::unique_ptr<ModelGenerator>> Create(const config::Config& config) {
    ASSIGN_OR_RETURN(std::unique_ptr<model::Checkpoint> checkpoint,
                     model::Checkpoint::Open(config.model.dir));
    ASSIGN_OR_RETURN(std::unique_ptr<engine::Backend> backend, CreateBackend(config, *checkpoint));
    config::CopyBiasSetting copy_bias = config::CopyBiasSetting::Off();
    if (config.model.copy_bias > 0) {
      // Workers tokenize the prompts; the engine only needs the template's tokens, to find
      // where in a prompt the user's text lies.
      ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> tokenizer,
                       model::Tokenizer::LoadFromModelDir(config.model.dir));
      ASSIGN_OR_RETURN(const model::PromptTemplate prompt_template,
                       model::PromptTemplate::Parse(config.model.prompt_template));
      ASSIGN_OR_RETURN(copy_bias, config::CopyBiasSetting::Create(config.model.copy_bias,
                                                                  prompt_template, *tokenizer));
    }
    return std::unique_ptr<ModelGenerator>(new ModelGenerator(
        std::move(backend), config::EngineOptionsFrom(*checkpoint), std::move(copy_bias)));
  }

  absl::Status Add(engine::SequenceId id, std::vector<int32_t> prompt,
                   int max_new_tokens) override {
    engine::GenerationParams params;
    params.max_new_tokens = max_new_tokens;
    copy_bias_.Apply(prompt, &params);
    return engine_.AddSequence(id, std::move(prompt), std::move(params));
  }
  bool Free(engine::SequenceId id) override { return engine_.Free(id).ok(); }
  bool HasWork() const override { return engine_.HasWork() || in_flight_ != nullptr; }

  // `ran` is the step dispatched now, `events` those of the step committed now.
  absl::Status Step(StepOutcome* out) override {
    out->ran.clear();
    out->events.clear();
    if (backend_->asynchronous()) return StepOnDeviceQueue(out);
    const engine::StepPlan& next = engine_.PlanStep();
    const engine::StepPlan* previous = in_flight_;
    if (previous != nullptr) RETURN_IF_ERROR(compute_.Wait());
    in_flight_ = nullptr;
    if (!next.empty()) {
      // The in-flight step's result is results_[slot_]; the next one goes to the other.
      compute_.Dispatch(&next.batch, &results_[slot_ ^ 1], /*back_to_back=*/previous != nullptr);
      in_flight_ = &next;
      out->ran = next.ids;
    }
    if (previous != nullptr) out->events = engine_.CommitStep(*previous, results_[slot_]);
    if (in_flight_ != nullptr) slot_ ^= 1;
    return absl::OkStatus();
  }

  // A device backend queues steps itself: step N+1 is submitted before step N is collected
  // and committed, so the device runs N+1 while the host commits N (no compute thread).
  absl::Status StepOnDeviceQueue(StepOutcome* out) {
    const engine::StepPlan& next = engine_.PlanStep();
    const engine::StepPlan* previous = in_flight_;
    in_flight_ = nullptr;
    if (!next.empty()) {
      RETURN_IF_ERROR(backend_->Submit(next.batch));
      in_flight_ = &next;
      out->ran = next.ids;
    }
    if (previous != nullptr) {
      RETURN_IF_ERROR(backend_->Collect(&results_[0]));
      out->events = engine_.CommitStep(*previous, results_[0]);
    }
    return absl::OkStatus();
  }

  void PublishGauges(ProcessMetrics& metrics) const override {
    const int total = engine_.num_blocks();
    metrics.SetKvCacheUsage(
        total == 0 ? 0.0 : static_cast<double>(total - engine_.num_free_blocks()) / total);
    metrics.SetQueueDepth(engine_.num_waiting());
  }

 private:
  ModelGenerator(std::unique_ptr<engine::Backend> backend, engine::EngineOptions options,
                 config::CopyBiasSetting copy_bias)
      : backend_(std::move(backend)),
        engine_(backend_.get(), nullptr, std::move(options)),
        copy_bias_(std::move(copy_bias)),
        compute_(backend_.get()) {}

  std::unique_ptr<engine::Backend> backend_;
  engine::Engine engine_;
  engine::StepResult results_[2];
  int slot_ = 0;
  const engine::StepPlan* in_flight_ = nullptr;  // dispatched, not committed
  config::CopyBiasSetting copy_bias_;
  ComputeThread compute_;  // last: joined first, before what its step uses goes
};

// The `echo` backend: every sequence's output is its prompt, all of it in the step after it
// arrived, so that the daemon's front-end path can be measured without a model.
class EchoGenerator final : public Generator {
 public:
  absl::Status Add(engine::SequenceId id, std::vector<int32_t> prompt, int) override {
    if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
    if (!prompts_.emplace(id, std::move(prompt)).second) {
      return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " is live"));
    }
    return absl::OkStatus();
  }
  bool Free(engine::SequenceId id) override { return prompts_.erase(id) > 0; }
  bool HasWork() const override { return !prompts_.empty(); }

  absl::Status Step(StepOutcome* out) override {
    out->ran.clear();
    out->events.clear();
    for (auto& [id, prompt] : prompts_) {
      out->ran.push_back(id);
      for (size_t i = 0; i < prompt.size(); ++i) {
        const bool last = i + 1 == prompt.size();
        out->events.push_back(
            {.id = id,
             .token = prompt[i],
             .finished = last,
             .reason = last ? engine::FinishReason::kLength : engine::FinishReason::kNone});
      }
    }
    prompts_.clear();
    return absl::OkStatus();
  }

  void PublishGauges(ProcessMetrics& metrics) const override {
    metrics.SetQueueDepth(static_cast<int64_t>(prompts_.size()));
  }

 private:
  absl::flat_hash_map<engine::SequenceId, std::vector<int32_t>> prompts_;
};

absl::StatusOr<std::unique_ptr<Generator>> MakeGenerator(const config::Config& config) {
  if (config.engine.backend == "echo") return std::make_unique<EchoGenerator>();
  if (config.engine.backend == "cpu" || config.engine.backend == "cuda") {
    ASSIGN_OR_RETURN(std::unique_ptr<ModelGenerator> model, ModelGenerator::Create(config));
    return model;
  }
  return absl::UnimplementedError(
      absl::StrCat("engine.backend '", config.engine.backend, "' is not available"));
}

// One tiny generation, so the first request does not pay for first-touch page faults and
// lazily built BLAS state.
absl::Status WarmUp(Generator& generator) {
  constexpr engine::SequenceId kWarmUpId = 0;  // real sequences start at 1
  RETURN_IF_ERROR(generator.Add(kWarmUpId, {0}, 1));
  Generator::StepOutcome outcome;
  while (generator.HasWork()) RETURN_IF_ERROR(generator.Step(&outcome));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<EngineLoop>> EngineLoop::Create(const config::Config& config,
                                                               const ipc::SharedSegment& segment,
                                                               ipc::WaitOptions wait) {
  ProcessMetrics* metrics =
      MetricsRegion(segment.metrics_region()).ForProcess(MetricsRegion::kEngineIndex);
  if (metrics == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment ", segment.name(), " has no metrics block for the engine"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Generator> generator, MakeGenerator(config));
  RETURN_IF_ERROR(WarmUp(*generator));
  return std::unique_ptr<EngineLoop>(new EngineLoop(segment, *metrics, std::move(generator), wait));
}

EngineLoop::EngineLoop(const ipc::SharedSegment& segment, ProcessMetrics& metrics,
                       std::unique_ptr<Generator> generator, ipc::WaitOptions wait)
    : segment_(segment),
      header_(segment.header()),
      metrics_(metrics),
      epoch_(segment.header()->engine_epoch.load(std::memory_order_acquire)),
      wait_(wait),
      generator_(std::move(generator)),
      endpoints_(segment.num_workers()) {
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
  spdlog::info("engine ready (epoch {})", epoch_);
  const ipc::Doorbell doorbell = segment_.engine_doorbell();
  for (;;) {
    const uint64_t epoch = header_->engine_epoch.load(std::memory_order_acquire);
    if (epoch != epoch_) {
      return absl::FailedPreconditionError(
          absl::StrCat("engine epoch ", epoch_, " superseded by ", epoch));
    }
    ResetDeadChannels();
    DrainRequests();
    if (generator_->HasWork()) RETURN_IF_ERROR(RunStep());
    generator_->PublishGauges(metrics_);
    SendReplies();
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
      metrics_.SequenceCancelled();
    }
    spdlog::info("worker {} restarted: dropped its {} requests, reset its rings", w, e.live.size());
    e.live.clear();
    e.outbox.clear();
    e.channel.CompleteReset();
    AttachEndpoint(e);
  }
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
                            .first_token_us = 0,
                            .tokens = {}};
  e.live.emplace(record.id, id);
  const absl::Status added = generator_->Add(id, std::move(record.tokens), record.max_new_tokens);
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
  const int64_t start_us = NowUs();
  RETURN_IF_ERROR(generator_->Step(&outcome));
  for (engine::SequenceId id : outcome.ran) {
    auto it = sequences_.find(id);
    if (it != sequences_.end() && it->second.first_step_us == 0)
      it->second.first_step_us = start_us;
  }
  const int64_t committed_us = NowUs();
  for (const engine::StepEvent& event : outcome.events) {
    auto it = sequences_.find(event.id);
    if (it == sequences_.end()) continue;
    if (it->second.first_token_us == 0) it->second.first_token_us = committed_us;
    if (event.reason != engine::FinishReason::kStopToken) it->second.tokens.push_back(event.token);
    if (event.finished) Reply(event.id, absl::StatusCode::kOk);
  }
  if (!outcome.ran.empty()) metrics_.ObserveBatch(static_cast<int>(outcome.ran.size()));
  return absl::OkStatus();
}

void EngineLoop::Reply(engine::SequenceId id, absl::StatusCode code, std::string message) {
  auto it = sequences_.find(id);
  Sequence& seq = it->second;
  const int64_t now_us = NowUs();
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
  record.tokens = std::move(seq.tokens);
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

}  // namespace gecd::server
