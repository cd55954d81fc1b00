#include "worker/ring_engine_link.h"

#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/assert.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace gecd::worker {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::unique_ptr<RingEngineLink>> RingEngineLink::Create(
    const ipc::SharedSegment& segment, int index, RingEngineLinkOptions options) {
  if (index < 0 || index >= segment.num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker index ", index, " outside [0, ", segment.num_workers(), ")"));
  }
  auto link = std::unique_ptr<RingEngineLink>(new RingEngineLink(segment, index, options));
  link->reader_ = std::thread([l = link.get()] { l->ReaderLoop(); });
  return link;
}

RingEngineLink::RingEngineLink(const ipc::SharedSegment& segment, int index,
                               RingEngineLinkOptions options)
    : segment_(segment),
      index_(index),
      header_(segment.header()),
      channel_(segment.channel(index)),
      engine_doorbell_(segment.engine_doorbell()),
      reader_doorbell_(channel_.responses().consumer_doorbell()),
      generation_(channel_.header()->generation.load(std::memory_order_acquire)),
      options_(options) {
  {
    MutexLock lock(&mu_);
    no_engine_since_ = Clock::now();
  }
  TryAttach();
}

RingEngineLink::~RingEngineLink() {
  stop_.store(true, std::memory_order_release);
  reader_doorbell_.Ring();
  reader_.join();
}

bool RingEngineLink::TryAttach() {
  if (attached_.load(std::memory_order_relaxed)) return true;
  if (channel_.header()->engine_generation.load(std::memory_order_acquire) != generation_) {
    return false;
  }
  {
    MutexLock lock(&mu_);
    producer_ = ipc::RingProducer(channel_.requests());
  }
  consumer_ = ipc::RingConsumer(channel_.responses());
  attached_.store(true, std::memory_order_release);
  return true;
}

bool RingEngineLink::Ready() const {
  const uint64_t epoch = header_->engine_epoch.load(std::memory_order_acquire);
  return epoch != 0 && header_->engine_ready_epoch.load(std::memory_order_acquire) == epoch &&
         attached_.load(std::memory_order_acquire);
}

EngineLoad RingEngineLink::Load() const {
  const ipc::StepTime step = segment_.step_time();
  return {.step_fixed_us = step.fixed_us,
          .step_per_sequence_us = step.per_sequence_us,
          .others_admitted = segment_.AdmittedByOtherWorkers(index_),
          .tokens_per_step = segment_.tokens_per_step()};
}

void RingEngineLink::PublishAdmitted(int admitted) { channel_.PublishAdmitted(admitted); }

absl::Status RingEngineLink::Submit(EngineRequest request, Done done) {
  if (!attached_.load(std::memory_order_acquire)) {
    return absl::UnavailableError("the engine is not ready");
  }
  ipc::SubmitRecord record;
  record.id = request.id;
  record.arrival_us = request.arrival_us;
  record.due_us = request.due_us;
  record.deadline_us = request.deadline_us;
  record.max_new_tokens = request.max_new_tokens;
  record.copy_bias = request.copy_bias;
  record.copy_begin = request.copy_begin;
  record.copy_end = request.copy_end;
  record.tokens = std::move(request.prompt);
  MutexLock lock(&mu_);
  // Read under the lock that ResubmitStale holds, so a request is either refused here or seen
  // by ResubmitStale's scan.
  record.epoch = header_->engine_ready_epoch.load(std::memory_order_acquire);
  if (record.epoch != checked_ready_epoch_) ResubmitStaleLocked(record.epoch);
  // Before a first engine there is nothing to hold for: the daemon is still starting.
  if (record.epoch == 0 && !engine_seen_) return absl::UnavailableError("the engine is not ready");
  if (in_flight_.contains(record.id)) {
    return absl::InvalidArgumentError(absl::StrCat("request id ", record.id, " is in flight"));
  }
  // With no engine ready (a restart) it is held for the next one.
  if (record.epoch != 0) RETURN_IF_ERROR(AppendLocked(record));
  const uint64_t id = record.id;
  in_flight_.emplace(id, InFlight{.done = std::move(done), .record = std::move(record)});
  return absl::OkStatus();
}

void RingEngineLink::Cancel(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return;
  // One waiting for the next engine has no engine to tell.
  const uint64_t epoch = it->second.record.epoch;
  const bool held =
      epoch != 0 && epoch == header_->engine_ready_epoch.load(std::memory_order_acquire);
  if (held && AppendLocked(ipc::CancelRecord{.id = id, .epoch = it->second.record.epoch}).ok()) {
    it->second.cancelled = true;
    return;
  }
  // No room to tell the engine, or no engine: answer now; an eventual reply finds no entry and
  // is dropped.
  EngineReply reply;
  reply.status = absl::CancelledError("cancelled");
  AnswerLocked(std::move(it->second.done), std::move(reply));
  in_flight_.erase(it);
}

void RingEngineLink::AnswerLocked(Done done, EngineReply reply) {
  local_.emplace_back(std::move(done), std::move(reply));
  if (!local_pending_.exchange(true, std::memory_order_acq_rel)) reader_doorbell_.Ring();
}

absl::Status RingEngineLink::AppendLocked(const ipc::Record& record) {
  const size_t max_bytes = channel_.requests().max_message_bytes();
  if (ipc::RecordBytes(record) > max_bytes) {
    const auto* submit = std::get_if<ipc::SubmitRecord>(&record);
    // A CANCEL is a few fixed fields, far below the smallest slot.
    GECD_RELEASE_ASSERT(submit != nullptr, "only a SUBMIT record can outgrow a ring message");
    return absl::InvalidArgumentError(absl::StrCat("a prompt of ", submit->tokens.size(),
                                                   " tokens does not fit one ring message of ",
                                                   max_bytes, " bytes"));
  }
  if (!open_ || !writer_.Add(record)) {
    if (open_) PublishLocked();  // full
    const std::span<uint8_t> slot = producer_.Reserve();
    if (slot.empty()) return absl::ResourceExhaustedError("the request ring is full");
    writer_ = ipc::MessageWriter(slot);
    writer_.Add(record);
    open_ = true;
    open_since_ = Clock::now();
  }
  // An idle engine gets the record at once; a busy one will not look before its step ends, so
  // let more records join this message and have the reader publish it shortly.
  if (producer_.ConsumerCaughtUp()) {
    PublishLocked();
  } else if (!flush_wanted_.exchange(true, std::memory_order_acq_rel)) {
    reader_doorbell_.Ring();
  }
  return absl::OkStatus();
}

void RingEngineLink::PublishLocked() {
  producer_.Commit(writer_.size());
  producer_.Publish();
  open_ = false;
  engine_doorbell_.Ring();
}

void RingEngineLink::ReaderLoop() {
  while (!stop_.load(std::memory_order_acquire)) {
    const bool attached = TryAttach();
    const bool flush_armed = flush_wanted_.load(std::memory_order_acquire);
    ipc::WaitOptions wait = options_.wait;
    if (flush_armed) wait.timeout = options_.flush_delay;
    reader_doorbell_.Wait(
        [&] {
          return stop_.load(std::memory_order_relaxed) || (attached && consumer_.HasMessage()) ||
                 local_pending_.load(std::memory_order_relaxed) ||
                 (!flush_armed && flush_wanted_.load(std::memory_order_relaxed));
        },
        wait);
    if (attached) DrainResponses();
    FlushIfDue();
    ResubmitStale();
    if (local_pending_.exchange(false, std::memory_order_acq_rel)) {
      std::vector<Completion> completions;
      {
        MutexLock lock(&mu_);
        completions.swap(local_);
      }
      Run(completions);
    }
  }
  FailAll(absl::UnavailableError("the engine link closed"));
}

void RingEngineLink::DrainResponses() {
  std::vector<ipc::DoneRecord> records;
  std::vector<Completion> completions;
  for (std::span<const uint8_t> message = consumer_.Peek(); !message.empty();
       message = consumer_.Peek()) {
    ipc::MessageReader reader(message);
    ipc::Record record;
    for (;;) {
      absl::StatusOr<bool> more = reader.Next(&record);
      if (!more.ok()) {
        spdlog::error("response ring: {}", more.status().ToString());
        break;
      }
      if (!*more) break;
      if (auto* done = std::get_if<ipc::DoneRecord>(&record)) {
        records.push_back(std::move(*done));
      } else {
        spdlog::error("response ring: a record that is not DONE");
      }
    }
    consumer_.Release();
  }
  if (records.empty()) return;
  {
    MutexLock lock(&mu_);
    for (ipc::DoneRecord& r : records) {
      auto it = in_flight_.find(r.id);
      // Not ours any more: already failed after an engine restart, or cancelled locally.
      if (it == in_flight_.end() || it->second.record.epoch != r.epoch) continue;
      EngineReply reply;
      const auto code = static_cast<absl::StatusCode>(r.status_code);
      if (code == absl::StatusCode::kCancelled) {
        reply.status = absl::CancelledError("cancelled");
      } else if (code != absl::StatusCode::kOk) {
        reply.status =
            absl::Status(code, r.message.empty() ? "the engine rejected the request" : r.message);
      }
      reply.tokens = std::move(r.tokens);
      reply.queue_us = r.queue_us;
      reply.engine_us = r.engine_us;
      reply.first_token_us = r.first_token_us;
      completions.emplace_back(std::move(it->second.done), std::move(reply));
      in_flight_.erase(it);
    }
  }
  Run(completions);
}

void RingEngineLink::FlushIfDue() {
  if (!flush_wanted_.load(std::memory_order_acquire)) return;
  MutexLock lock(&mu_);
  if (open_ &&
      (Clock::now() - open_since_ >= options_.flush_delay || producer_.ConsumerCaughtUp())) {
    PublishLocked();
  }
  flush_wanted_.store(open_, std::memory_order_release);
}

void RingEngineLink::ResubmitStale() {
  bool gave_up = false;
  {
    MutexLock lock(&mu_);
    const uint64_t ready = header_->engine_ready_epoch.load(std::memory_order_acquire);
    if (ready != checked_ready_epoch_) {
      ResubmitStaleLocked(ready);
    } else {
      gave_up = ready == 0 && !in_flight_.empty() &&
                Clock::now() - no_engine_since_ > options_.engine_wait;
    }
  }
  if (gave_up) {
    FailAll(absl::UnavailableError(
        absl::StrCat("no engine became ready within ", options_.engine_wait.count(), " ms")));
  }
}

void RingEngineLink::ResubmitStaleLocked(uint64_t ready_epoch) {
  if (ready_epoch == 0 && checked_ready_epoch_ != 0) no_engine_since_ = Clock::now();
  checked_ready_epoch_ = ready_epoch;
  if (ready_epoch == 0) return;  // none ready: the requests wait for the next engine
  engine_seen_ = true;
  int resubmitted = 0, failed = 0;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    InFlight& entry = it->second;
    if (entry.record.epoch == ready_epoch) {
      ++it;
      continue;
    }
    const bool sent_before = entry.record.epoch != 0;
    absl::Status status;
    if (entry.cancelled) {
      status = absl::CancelledError("cancelled");
    } else if (sent_before && entry.resubmits > 0) {
      status = absl::UnavailableError(
          "the engine restarted twice with the request in flight; not sent a third time");
    } else {
      entry.record.epoch = ready_epoch;
      if (sent_before) ++entry.resubmits;
      status = AppendLocked(entry.record);
      if (!status.ok()) {
        status = absl::UnavailableError(absl::StrCat(
            "the engine restarted with the request in flight, and re-sending it failed: ",
            status.message()));
      }
    }
    if (status.ok()) {
      ++resubmitted;
      ++it;
      continue;
    }
    ++failed;
    EngineReply reply;
    reply.status = std::move(status);
    AnswerLocked(std::move(entry.done), std::move(reply));
    in_flight_.erase(it++);
  }
  if (resubmitted + failed > 0) {
    spdlog::warn("engine epoch {}: re-submitted {} requests in flight, failed {}", ready_epoch,
                 resubmitted, failed);
  }
}

void RingEngineLink::FailAll(absl::Status status) {
  std::vector<Completion> completions;
  {
    MutexLock lock(&mu_);
    completions.swap(local_);
    for (auto& [id, entry] : in_flight_) {
      EngineReply reply;
      reply.status = status;
      completions.emplace_back(std::move(entry.done), std::move(reply));
    }
    in_flight_.clear();
  }
  Run(completions);
}

void RingEngineLink::Run(std::vector<Completion>& completions) {
  for (auto& [done, reply] : completions) done(std::move(reply));
  completions.clear();
}

}  // namespace gecd::worker
