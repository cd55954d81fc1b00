#include "loadgen/load_runner.h"

#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"
#include "loadgen/arrival_schedule.h"

namespace gecd::loadgen {
namespace {

using v1::CorrectRequest;
using v1::CorrectResponse;
using v1::GrammarCorrection;

std::chrono::system_clock::time_point DeadlineFromNow(int ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

// Whatever a completion-queue tag points at.
class CqTag {
 public:
  virtual ~CqTag() = default;
  virtual void Proceed(bool ok) = 0;
};

class Driver;

// One unary Correct; deletes itself when it completes.
class UnaryCall final : public CqTag {
 public:
  UnaryCall(Driver* driver, Clock::time_point intended) : driver_(driver), intended_(intended) {}

  void Start(GrammarCorrection::Stub* stub, grpc::CompletionQueue* cq, const std::string& text,
             int deadline_ms, const std::string& priority, const std::string& authorization) {
    request_.set_text(text);
    request_.set_priority(priority);
    if (!authorization.empty()) context_.AddMetadata("authorization", authorization);
    context_.set_deadline(DeadlineFromNow(deadline_ms));
    reader_ = stub->AsyncCorrect(&context_, request_, cq);
    reader_->Finish(&response_, &status_, this);
  }

  void Proceed(bool ok) override;

 private:
  Driver* driver_;
  Clock::time_point intended_;
  grpc::ClientContext context_;
  CorrectRequest request_;
  CorrectResponse response_;
  grpc::Status status_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<CorrectResponse>> reader_;
};

// One CorrectStream carrying many sentences. gRPC allows one outstanding write per stream, so
// sends queue behind the write in progress; responses are matched to their intended send time
// by request_id. Lives until the driver is destroyed, after its completion queue is drained.
class StreamSession {
 public:
  StreamSession(Driver* driver, GrammarCorrection::Stub* stub, grpc::CompletionQueue* cq,
                std::chrono::system_clock::time_point deadline);

  void Send(Clock::time_point intended, const std::string& text) ABSL_LOCKS_EXCLUDED(mu_);
  // Half-closes once the queued writes are out.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A tag that calls back into the session.
  struct Step final : CqTag {
    Step(StreamSession* s, void (StreamSession::*f)(bool)) : session(s), fn(f) {}
    void Proceed(bool ok) override { (session->*fn)(ok); }
    StreamSession* session;
    void (StreamSession::*fn)(bool);
  };

  void OnStarted(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void OnWritten(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void OnRead(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void OnFinished(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void OnHalfClosed(bool ok) {}
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Driver* driver_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<CorrectRequest, CorrectResponse>> stream_;
  Step started_{this, &StreamSession::OnStarted};
  Step written_{this, &StreamSession::OnWritten};
  Step read_{this, &StreamSession::OnRead};
  Step finished_{this, &StreamSession::OnFinished};
  Step half_closed_{this, &StreamSession::OnHalfClosed};
  CorrectResponse response_;
  grpc::Status status_;

  Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;    // started, and no write has failed
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a Write or WritesDone is outstanding
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  CorrectRequest in_write_ ABSL_GUARDED_BY(mu_);
  std::deque<CorrectRequest> queued_ ABSL_GUARDED_BY(mu_);
  // A sentence written and not yet answered: when it was meant to go, and its length.
  struct Sent {
    Clock::time_point intended;
    size_t text_bytes = 0;
  };
  std::unordered_map<std::string, Sent> unanswered_ ABSL_GUARDED_BY(mu_);
};

// Owns the channels, completion-queue threads and the recorder of one run.
class Driver {
 public:
  explicit Driver(const RunConfig& config);
  ~Driver();

  absl::Status Connect();
  RunResult Run();

  // A request ended: record it and, in closed loop, send its successor (after `pushback`, the
  // server's word on a refusal, when the run honours it).
  void Finished(Clock::time_point intended, int code, size_t text_bytes,
                std::chrono::milliseconds pushback = std::chrono::milliseconds(0));
  // A closed-loop slot whose pushback is over: its next send, if the window is still open.
  void IssueAfterPushback();
  LoadRecorder& recorder() { return *recorder_; }
  const std::string& priority() const { return config_.priority; }
  const std::string& authorization() const { return config_.authorization; }
  void BeginWork() { active_.fetch_add(1, std::memory_order_relaxed); }
  void EndWork() ABSL_LOCKS_EXCLUDED(drain_mu_);

 private:
  struct Lane {
    std::string target;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<GrammarCorrection::Stub> stub;
    grpc::CompletionQueue* cq;
    std::unique_ptr<StreamSession> stream;
  };

  void Issue(Clock::time_point intended);

  const RunConfig& config_;
  Clock::time_point start_;
  Clock::time_point window_end_;
  std::unique_ptr<LoadRecorder> recorder_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> cqs_;
  std::vector<std::thread> pollers_;
  std::vector<Lane> lanes_;
  // Call i goes on lane i % lanes with sentence (i / lanes) % sentences, so that every lane sends
  // every sentence. Two counters stepped together pinned sentence k to lane k whenever the
  // sentences were a multiple of the lanes (bench/short_sentences.txt's 8 on 8 channels): each
  // daemon worker then saw only its connections' sentences, and learned a different mix.
  std::atomic<uint64_t> next_call_{0};
  std::atomic<int64_t> active_{0};  // unary calls in flight plus open streams
  // Guards no data (active_ is atomic): taken around drained_'s signal and wait so that the
  // last EndWork cannot signal between Run's check of active_ and its wait.
  Mutex drain_mu_;
  CondVar drained_;
};

// A closed-loop slot waiting out a refusal's pushback before its next send; deletes itself.
class DelayedIssue final : public CqTag {
 public:
  DelayedIssue(Driver* driver, grpc::CompletionQueue* cq, Clock::time_point at);
  void Proceed(bool ok) override;

 private:
  Driver* driver_;
  grpc::Alarm alarm_;
};

// The server's grpc-retry-pushback-ms trailer; 0 when absent or malformed.
int64_t PushbackMs(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto it = trailers.find("grpc-retry-pushback-ms");
  int64_t ms = 0;
  if (it == trailers.end() ||
      !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &ms)) {
    return 0;
  }
  return std::max<int64_t>(ms, 0);
}

void UnaryCall::Proceed(bool ok) {
  Driver* driver = driver_;
  driver->Finished(intended_, status_.error_code(), request_.text().size(),
                   std::chrono::milliseconds(PushbackMs(context_)));
  delete this;
  driver->EndWork();
}

StreamSession::StreamSession(Driver* driver, GrammarCorrection::Stub* stub,
                             grpc::CompletionQueue* cq,
                             std::chrono::system_clock::time_point deadline)
    : driver_(driver) {
  context_.set_deadline(deadline);
  if (!driver_->authorization().empty())
    context_.AddMetadata("authorization", driver_->authorization());
  driver_->BeginWork();
  // Prepared, then started: the start tag may complete before an Async* call would return.
  stream_ = stub->PrepareAsyncCorrectStream(&context_, cq);
  stream_->StartCall(&started_);
}

void StreamSession::Send(Clock::time_point intended, const std::string& text) {
  ReleasableMutexLock lock(&mu_);
  if (closing_) return;
  driver_->recorder().RecordSent(intended);
  if (done_) {
    lock.Release();
    driver_->recorder().RecordDone(intended, Clock::now(), grpc::StatusCode::UNAVAILABLE,
                                   text.size());
    return;
  }
  CorrectRequest& request = queued_.emplace_back();
  request.set_text(text);
  request.set_priority(driver_->priority());
  request.set_request_id(absl::StrCat(next_id_++));
  unanswered_.emplace(request.request_id(), Sent{intended, text.size()});
  if (ready_ && !writing_) WriteNextLocked();
}

void StreamSession::Close() {
  MutexLock lock(&mu_);
  closing_ = true;
  if (ready_ && !writing_) WriteNextLocked();
}

void StreamSession::WriteNextLocked() {
  if (!queued_.empty()) {
    in_write_ = std::move(queued_.front());
    queued_.pop_front();
    writing_ = true;
    stream_->Write(in_write_, &written_);
  } else if (closing_) {
    writing_ = true;  // never cleared: nothing may be written after WritesDone
    stream_->WritesDone(&half_closed_);
  }
}

void StreamSession::OnStarted(bool ok) {
  if (!ok) {
    stream_->Finish(&status_, &finished_);
    return;
  }
  stream_->Read(&response_, &read_);
  MutexLock lock(&mu_);
  ready_ = true;
  WriteNextLocked();
}

void StreamSession::OnWritten(bool ok) {
  MutexLock lock(&mu_);
  writing_ = false;
  if (ok) {
    WriteNextLocked();
  } else {
    ready_ = false;  // the stream is broken; the failing read finishes it
  }
}

void StreamSession::OnRead(bool ok) {
  if (!ok) {
    stream_->Finish(&status_, &finished_);
    return;
  }
  Sent sent;
  {
    MutexLock lock(&mu_);
    auto it = unanswered_.find(response_.request_id());
    if (it == unanswered_.end()) {
      stream_->Read(&response_, &read_);
      return;  // not ours: nothing to time
    }
    sent = it->second;
    unanswered_.erase(it);
  }
  const int code = response_.has_status() ? response_.status().code() : 0;
  stream_->Read(&response_, &read_);
  driver_->Finished(sent.intended, code, sent.text_bytes);
}

void StreamSession::OnFinished(bool ok) {
  const Clock::time_point now = Clock::now();
  // Sentences the stream ended without answering fail with its status.
  const int code = status_.ok() ? kUnanswered : status_.error_code();
  std::unordered_map<std::string, Sent> unanswered;
  {
    MutexLock lock(&mu_);
    done_ = true;
    ready_ = false;
    queued_.clear();
    unanswered.swap(unanswered_);
  }
  for (const auto& [id, sent] : unanswered) {
    driver_->recorder().RecordDone(sent.intended, now, code, sent.text_bytes);
  }
  driver_->EndWork();
}

Driver::Driver(const RunConfig& config) : config_(config) {
  for (int i = 0; i < std::max(config.threads, 1); ++i) {
    cqs_.push_back(std::make_unique<grpc::CompletionQueue>());
  }
  for (int i = 0; i < config.channels; ++i) {
    Lane& lane = lanes_.emplace_back();
    lane.target = config.targets[i % config.targets.size()];
    lane.channel = NewLoadChannel(config, i);
    lane.stub = GrammarCorrection::NewStub(lane.channel);
    lane.cq = cqs_[i % cqs_.size()].get();
  }
}

Driver::~Driver() {
  for (auto& cq : cqs_) cq->Shutdown();
  for (auto& poller : pollers_) poller.join();
}

absl::Status Driver::Connect() {
  for (Lane& lane : lanes_) {
    if (!lane.channel->WaitForConnected(DeadlineFromNow(5000))) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", lane.target, " within 5 s"));
    }
  }
  return absl::OkStatus();
}

void Driver::Issue(Clock::time_point intended) {
  const uint64_t call = next_call_.fetch_add(1, std::memory_order_relaxed);
  Lane& lane = lanes_[call % lanes_.size()];
  const std::string& sentence =
      config_.sentences[(call / lanes_.size()) % config_.sentences.size()];
  if (lane.stream != nullptr) {
    lane.stream->Send(intended, sentence);
    return;
  }
  recorder_->RecordSent(intended);
  BeginWork();
  (new UnaryCall(this, intended))
      ->Start(lane.stub.get(), lane.cq, sentence, config_.deadline_ms, config_.priority,
              config_.authorization);
}

void Driver::Finished(Clock::time_point intended, int code, size_t text_bytes,
                      std::chrono::milliseconds pushback) {
  const Clock::time_point now = Clock::now();
  recorder_->RecordDone(intended, now, code, text_bytes);
  if (config_.concurrency == 0 || now >= window_end_) return;
  if (config_.honor_pushback && pushback.count() > 0) {
    // A slot whose pushback outlasts the window sends no more.
    if (now + pushback >= window_end_) return;
    BeginWork();  // the slot is still busy: Run waits for it
    // Any lane's queue will do for the alarm.
    Lane& lane = lanes_[next_call_.load(std::memory_order_relaxed) % lanes_.size()];
    new DelayedIssue(this, lane.cq, now + pushback);
    return;
  }
  Issue(now);
}

void Driver::IssueAfterPushback() {
  const Clock::time_point now = Clock::now();
  if (now < window_end_) Issue(now);
  EndWork();
}

DelayedIssue::DelayedIssue(Driver* driver, grpc::CompletionQueue* cq, Clock::time_point at)
    : driver_(driver) {
  alarm_.Set(cq,
             std::chrono::system_clock::now() +
                 std::chrono::duration_cast<std::chrono::system_clock::duration>(at - Clock::now()),
             this);
}

void DelayedIssue::Proceed(bool ok) {
  Driver* driver = driver_;
  delete this;
  driver->IssueAfterPushback();
}

void Driver::EndWork() {
  if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    MutexLock lock(&drain_mu_);
    drained_.SignalAll();
  }
}

RunResult Driver::Run() {
  using Seconds = std::chrono::duration<double>;
  start_ = Clock::now();
  const Clock::time_point window_start =
      start_ + std::chrono::duration_cast<Clock::duration>(Seconds(config_.warmup_s));
  window_end_ =
      window_start + std::chrono::duration_cast<Clock::duration>(Seconds(config_.duration_s));
  recorder_ = std::make_unique<LoadRecorder>(window_start, window_end_, config_.objective,
                                             config_.concurrency > 0
                                                 ? LoadRecorder::Counting::kByCompletionTime
                                                 : LoadRecorder::Counting::kBySendTime);
  if (config_.on_window) config_.on_window(window_start, window_end_);
  for (auto& cq : cqs_) {
    pollers_.emplace_back([cq = cq.get()] {
      void* tag;
      bool ok;
      while (cq->Next(&tag, &ok)) static_cast<CqTag*>(tag)->Proceed(ok);
    });
  }
  if (config_.stream) {
    const auto stream_deadline =
        std::chrono::system_clock::now() +
        std::chrono::duration_cast<std::chrono::system_clock::duration>(window_end_ - start_) +
        std::chrono::milliseconds(config_.deadline_ms);
    for (Lane& lane : lanes_) {
      lane.stream =
          std::make_unique<StreamSession>(this, lane.stub.get(), lane.cq, stream_deadline);
    }
  }

  if (config_.concurrency > 0) {
    for (int i = 0; i < config_.concurrency; ++i) Issue(Clock::now());
    std::this_thread::sleep_until(window_end_);
  } else {
    ArrivalSchedule schedule(config_.profile, config_.warmup_s, config_.seed);
    while (true) {
      const Clock::time_point intended =
          start_ + std::chrono::duration_cast<Clock::duration>(Seconds(schedule.Next()));
      if (intended >= window_end_) break;
      // Arrivals that fell due while sleeping go out at once, timed from when they were due.
      if (intended > Clock::now()) std::this_thread::sleep_until(intended);
      Issue(intended);
    }
  }

  for (Lane& lane : lanes_) {
    if (lane.stream != nullptr) lane.stream->Close();
  }
  MutexLock lock(&drain_mu_);
  while (active_.load(std::memory_order_acquire) != 0) drained_.Wait(&drain_mu_);
  return recorder_->Finish();
}

}  // namespace

std::shared_ptr<grpc::Channel> NewLoadChannel(const RunConfig& config, int index) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!config.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = config.tls_ca_pem;
    credentials = grpc::SslCredentials(tls);
  }
  grpc::ChannelArguments args;
  // Channels with equal args share one connection; a distinct arg and a private subchannel pool
  // give each its own.
  args.SetInt("gecd.load.channel", index);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!config.tls_server_name.empty()) args.SetSslTargetNameOverride(config.tls_server_name);
  return grpc::CreateCustomChannel(config.targets[index % config.targets.size()], credentials,
                                   args);
}

absl::StatusOr<RunResult> RunLoad(const RunConfig& config) {
  if (config.sentences.empty()) return absl::InvalidArgumentError("no sentences to send");
  if (config.targets.empty()) return absl::InvalidArgumentError("no target to send to");
  if (config.channels < static_cast<int>(config.targets.size())) {
    return absl::InvalidArgumentError(absl::StrCat(config.channels, " channels for ",
                                                   config.targets.size(),
                                                   " targets: each target needs one"));
  }
  Driver driver(config);
  absl::Status connected = driver.Connect();
  if (!connected.ok()) return connected;
  return driver.Run();
}

}  // namespace gecd::loadgen
