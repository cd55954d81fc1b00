#include "worker/grammar_service.h"

#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_callback.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "testing/byte_level_tokenizer.h"
#include "testing/scoped_temp_dir.h"
#include "testing/test_paths.h"
#include "text/edits.h"
#include "tls/test_certificates.h"
#include "worker/worker_server.h"

namespace gecd::worker {
namespace {

using gecd::v1::CorrectRequest;
using gecd::v1::CorrectResponse;
using metrics::FormatPrometheus;
using metrics::MetricsRegion;
using metrics::MetricsSnapshot;
using metrics::ProcessMetrics;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

constexpr auto kWait = std::chrono::seconds(60);  // generous: a loaded 2-core machine

// What the fake engine "corrects" a prompt to: its text in upper case, re-tokenized.
std::vector<int32_t> FakeCorrection(const model::Tokenizer& tokenizer,
                                    std::span<const int32_t> prompt) {
  std::string text = tokenizer.Decode(prompt);
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return *tokenizer.Encode(text);
}

// An in-process EngineLink. Replies come from its own threads, as the real link's do (one
// thread keeps their order; several race each other, as a stress test wants). In hold mode
// requests wait until the test releases them (or cancels them), so a test controls completion
// order and how many are in flight.
class FakeEngine final : public EngineLink {
 public:
  explicit FakeEngine(const model::Tokenizer& tokenizer, int delivery_threads = 1)
      : tokenizer_(tokenizer) {
    for (int i = 0; i < delivery_threads; ++i) threads_.emplace_back([this] { Deliver(); });
  }
  ~FakeEngine() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  absl::Status Submit(EngineRequest request, Done done) override {
    std::unique_lock lock(mu_);
    if (block_submits_) {
      ++blocked_submits_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return !block_submits_; });
    }
    if (!ready_) return absl::UnavailableError("engine not ready");
    submitted_.push_back(request);
    if (hold_) {
      held_.push_back({std::move(request), std::move(done)});
    } else {
      Reply(std::move(request), std::move(done), absl::OkStatus());
    }
    cv_.notify_all();
    return absl::OkStatus();
  }

  void Cancel(uint64_t id) override {
    std::lock_guard lock(mu_);
    cancelled_.push_back(id);
    auto it = std::find_if(held_.begin(), held_.end(),
                           [id](const Held& h) { return h.request.id == id; });
    if (it != held_.end()) {
      Reply(std::move(it->request), std::move(it->done), absl::CancelledError("cancelled"));
      held_.erase(it);
    }
    cv_.notify_all();
  }

  bool Ready() const override {
    std::lock_guard lock(mu_);
    return ready_;
  }

  void set_ready(bool ready) {
    std::lock_guard lock(mu_);
    ready_ = ready;
  }
  void set_hold(bool hold) {
    std::lock_guard lock(mu_);
    hold_ = hold;
  }
  // While set, Submit does not return: a sentence's start that takes its time.
  void set_block_submits(bool block) {
    std::lock_guard lock(mu_);
    block_submits_ = block;
    cv_.notify_all();
  }
  // Waits until `n` submits have been blocked in all; false on timeout.
  bool WaitForBlockedSubmits(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return blocked_submits_ >= n; });
  }
  // Every request submitted so far, in order.
  std::vector<EngineRequest> Submitted() const {
    std::lock_guard lock(mu_);
    return submitted_;
  }
  // Waits until `n` requests are held; false on timeout.
  bool WaitForHeld(size_t n, std::chrono::milliseconds timeout = kWait) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return held_.size() >= n; });
  }
  bool WaitForCancelled(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return cancelled_.size() >= n; });
  }
  // Fails held request `index` (in submission order among those held) with `status`.
  void FailHeld(size_t index, absl::Status status) {
    std::lock_guard lock(mu_);
    Reply(std::move(held_[index].request), std::move(held_[index].done), std::move(status));
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(index));
    cv_.notify_all();
  }
  // Answers the held request whose prompt decodes to `prompt`, with `status` (OK: the fake
  // correction); false when none is held.
  bool ReleasePrompt(const std::string& prompt, absl::Status status = absl::OkStatus()) {
    std::lock_guard lock(mu_);
    auto it = std::find_if(held_.begin(), held_.end(), [&](const Held& h) {
      return tokenizer_.Decode(h.request.prompt) == prompt;
    });
    if (it == held_.end()) return false;
    Reply(std::move(it->request), std::move(it->done), std::move(status));
    held_.erase(it);
    cv_.notify_all();
    return true;
  }
  // Answers every held request, the most recent first.
  void ReleaseNewestFirst() {
    std::lock_guard lock(mu_);
    while (!held_.empty()) {
      Reply(std::move(held_.back().request), std::move(held_.back().done), absl::OkStatus());
      held_.pop_back();
    }
    cv_.notify_all();
  }

 private:
  struct Held {
    EngineRequest request;
    Done done;
  };

  void Reply(EngineRequest request, Done done, absl::Status status) {
    EngineReply reply;
    reply.status = std::move(status);
    if (reply.status.ok()) reply.tokens = FakeCorrection(tokenizer_, request.prompt);
    reply.queue_us = 7;
    reply.engine_us = 11;
    outbox_.push_back(
        [done = std::move(done), reply = std::move(reply)]() mutable { done(std::move(reply)); });
  }

  void Deliver() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stop_ || !outbox_.empty(); });
      if (outbox_.empty()) return;
      std::function<void()> next = std::move(outbox_.front());
      outbox_.pop_front();
      lock.unlock();
      next();
      lock.lock();
    }
  }

  const model::Tokenizer& tokenizer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = true;
  bool hold_ = false;
  bool block_submits_ = false;
  int blocked_submits_ = 0;
  bool stop_ = false;
  std::vector<Held> held_;
  std::vector<EngineRequest> submitted_;
  std::vector<uint64_t> cancelled_;
  std::deque<std::function<void()>> outbox_;
  std::vector<std::thread> threads_;  // last: they start after the state above exists
};

// 64-byte aligned storage for one process's metrics block.
struct MetricsStorage {
  MetricsStorage() : bytes(MetricsRegion::BytesFor(1) + 64), region(Init()) {}
  MetricsRegion Init() {
    auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(bytes.data()) + 63) &
                                            ~uintptr_t{63});
    return MetricsRegion::Initialize({base, MetricsRegion::BytesFor(1)});
  }
  uint64_t Requests(grpc::StatusCode code) const {
    return region.Sum().requests[static_cast<size_t>(code)];
  }
  std::vector<uint8_t> bytes;
  MetricsRegion region;
};

class GrammarServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gecd::testing::WriteByteLevelTokenizer(model_dir_.path());
    auto tokenizer = model::Tokenizer::LoadFromModelDir(model_dir_.path());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    engine_ = std::make_unique<FakeEngine>(*tokenizer_);
    config_.server.max_input_chars = 100;
    config_.server.max_in_flight = 4;
    // Off unless a test is about it: the admission tests re-send one sentence and need each
    // copy in the engine.
    config_.server.sentence_cache_mb = 0;
    // One start at a time (see StartQueue): sentences reach the fake engine in arrival order,
    // which the tests that hold and release them rely on.
    config_.spelling.instances = 1;
  }

  void StartServer(GrammarService::Options service_options = {}) {
    WorkerServer::Options options;
    options.listen = "127.0.0.1:0";
    options.service = service_options;
    options.health_poll = std::chrono::milliseconds(10);
    auto server = WorkerServer::Start(config_, *tokenizer_, *engine_,
                                      *metrics_.region.ForProcess(0), options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = gecd::v1::GrammarCorrection::NewStub(channel_);
  }

  std::string Expected(const std::string& text) {
    return tokenizer_->Decode(FakeCorrection(*tokenizer_, *tokenizer_->Encode(text)));
  }

  grpc::Status Correct(const std::string& text, CorrectResponse* response,
                       std::chrono::milliseconds timeout = kWait) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    CorrectRequest request;
    request.set_text(text);
    request.set_request_id("r-" + text);
    return stub_->Correct(&context, request, response);
  }

  // A unary call left running. Wait() blocks until its status comes. Destroying one whose
  // status has not come cancels the call and waits for it, so that gRPC's callback never runs
  // on a freed call (a test whose ASSERT fails returns with calls still pending).
  class PendingCall {
   public:
    ~PendingCall() {
      context.TryCancel();
      Wait();
    }
    grpc::Status Wait() { return *WaitFor(std::chrono::hours(1)); }
    // The status, or nothing if it has not come within `timeout`.
    std::optional<grpc::Status> WaitFor(std::chrono::milliseconds timeout) {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, timeout, [&] { return status_.has_value(); });
      return status_;
    }
    // gRPC's callback. Notifies under the lock: once the waiter sees the status, the callback
    // no longer touches this object.
    void Done(grpc::Status status) {
      std::lock_guard lock(mu_);
      status_ = std::move(status);
      cv_.notify_all();
    }

    grpc::ClientContext context;
    CorrectRequest request;
    CorrectResponse response;

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::optional<grpc::Status> status_;
  };
  // `priority`: the x-gecd-priority header, none when empty.
  std::unique_ptr<PendingCall> StartCorrect(const std::string& text,
                                            std::chrono::milliseconds timeout = kWait,
                                            const std::string& priority = "") {
    auto call = std::make_unique<PendingCall>();
    call->request.set_text(text);
    if (!priority.empty()) call->context.AddMetadata("x-gecd-priority", priority);
    call->context.set_deadline(std::chrono::system_clock::now() + timeout);
    stub_->async()->Correct(&call->context, &call->request, &call->response,
                            [c = call.get()](grpc::Status s) { c->Done(std::move(s)); });
    return call;
  }

  // A CorrectStream call that has sent `text` with stream_sentences, its deadline `timeout`
  // away.
  struct SentenceStream {
    // A test whose ASSERT fails leaves the stream unfinished: the call ends here all the same.
    ~SentenceStream() { context.TryCancel(); }
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<CorrectRequest, CorrectResponse>> stream;
    CorrectRequest request;  // the one sent
  };
  std::unique_ptr<SentenceStream> StreamSentences(const std::string& text,
                                                  const std::string& request_id = "",
                                                  std::chrono::milliseconds timeout = kWait) {
    auto call = std::make_unique<SentenceStream>();
    call->context.set_deadline(std::chrono::system_clock::now() + timeout);
    call->stream = stub_->CorrectStream(&call->context);
    call->request.set_text(text);
    call->request.set_request_id(request_id);
    call->request.set_stream_sentences(true);
    EXPECT_TRUE(call->stream->Write(call->request));
    return call;
  }

  // One unary call through the generic stub, for services we have no C++ stubs of.
  grpc::Status GenericUnary(const std::string& method, const std::string& request_bytes,
                            std::string* response_bytes) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kWait);
    grpc::Slice slice(request_bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) { done.set_value(s); });
    grpc::Status status = done.get_future().get();
    std::vector<grpc::Slice> slices;
    if (status.ok() && response.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) response_bytes->append(s.begin(), s.end());
    }
    return status;
  }

  // grpc.health.v1 Check for the whole server ("") or one service by name: 1 SERVING,
  // 2 NOT_SERVING.
  int HealthStatus(const std::string& service = "") {
    std::string response;
    // HealthCheckRequest{service = 1 (length-delimited)}; "" is the empty message.
    const std::string request =
        service.empty()
            ? ""
            : absl::StrCat("\x0a", std::string(1, static_cast<char>(service.size())), service);
    const grpc::Status status = GenericUnary("/grpc.health.v1.Health/Check", request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    // HealthCheckResponse{status = 1 (varint)}; an absent field is 0, UNKNOWN.
    return response.size() == 2 && response[0] == 0x08 ? response[1] : 0;
  }

  // Polls an eventual server-side state.
  static bool WaitUntil(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  bool WaitForHealth(int want, const std::string& service = "") {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    int got = HealthStatus(service);
    // Polls an eventual state (the server's 10 ms health poll); each try is a full RPC.
    while (got != want && std::chrono::steady_clock::now() < deadline) got = HealthStatus(service);
    return got == want;
  }

  gecd::testing::ScopedTempDir model_dir_;
  config::Config config_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<FakeEngine> engine_;
  MetricsStorage metrics_;
  std::unique_ptr<WorkerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<gecd::v1::GrammarCorrection::Stub> stub_;
};

TEST_F(GrammarServiceTest, UnaryAnswersWithCorrectionEditsAndCounts) {
  StartServer();
  const std::string text = "she go home, to café.";
  CorrectResponse response;
  ASSERT_TRUE(Correct(text, &response).ok());
  EXPECT_EQ(response.request_id(), "r-" + text);
  EXPECT_EQ(response.corrected_text(), Expected(text));
  std::vector<gecd::text::TextEdit> edits;
  for (const auto& e : response.edits()) edits.push_back({e.start(), e.end(), e.replacement()});
  EXPECT_FALSE(edits.empty());
  EXPECT_EQ(gecd::text::ApplyEdits(text, edits), response.corrected_text());
  EXPECT_EQ(response.prompt_tokens(), tokenizer_->Encode(text)->size());
  EXPECT_GT(response.output_tokens(), 0u);
  EXPECT_EQ(response.queue_time_us(), 7u);
  EXPECT_EQ(response.engine_time_us(), 11u);
  EXPECT_EQ(metrics_.Requests(grpc::StatusCode::OK), 1u);
}

// With tls.cert_file set the worker speaks TLS only: a plaintext client gets no answer, a
// client trusting the certificate's CA is corrected as usual.
TEST_F(GrammarServiceTest, WithTlsItAnswersOverTlsOnly) {
  gecd::testing::ScopedTempDir certificates;
  const gecd::testing::TestCa ca("test CA");
  const gecd::testing::PemPair pair = ca.Issue("gecd");
  config_.tls.cert_file = certificates.path() + "/tls.crt";
  config_.tls.key_file = certificates.path() + "/tls.key";
  gecd::testing::WritePemPair(pair, config_.tls.cert_file, config_.tls.key_file);
  StartServer();
  CorrectResponse response;
  EXPECT_EQ(Correct("she go home", &response).error_code(), grpc::StatusCode::UNAVAILABLE);

  grpc::SslCredentialsOptions trust;
  trust.pem_root_certs = ca.certificate();
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::SslCredentials(trust), args);
  stub_ = gecd::v1::GrammarCorrection::NewStub(channel_);
  ASSERT_TRUE(Correct("she go home", &response).ok());
  EXPECT_EQ(response.corrected_text(), Expected("she go home"));
}

// With auth.tokens_file: calls without a token, with a wrong one or with a revoked one are
// refused with UNAUTHENTICATED (unary and stream); the right one is answered, counted under its
// name and logged with it; the token itself appears in neither the log nor the metrics.
TEST_F(GrammarServiceTest, BearerTokensLetInOnlyTheirClients) {
  gecd::testing::ScopedTempDir dir;
  const std::string token = "s3cr3t-token-4b1d";
  // SHA-256 of "s3cr3t-token-4b1d", as `printf %s s3cr3t-token-4b1d | sha256sum` prints it.
  const std::string hash = "024cce3293b67d5c742eb2606ca27a02d22cf2f5bf6429a06dfa2e1ade56e8ca";
  config_.auth.tokens_file = dir.path() + "/tokens";
  config_.auth.refresh_s = 1;
  gecd::testing::WriteTestFile(config_.auth.tokens_file, "frontend " + hash + "\n");
  auto log = std::make_shared<std::ostringstream>();
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*log);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  spdlog::set_level(spdlog::level::debug);
  StartServer();
  const auto correct = [&](const std::string& authorization) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kWait);
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    CorrectRequest request;
    request.set_text("she go home");
    CorrectResponse response;
    return stub_->Correct(&context, request, &response).error_code();
  };
  EXPECT_EQ(correct(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(correct("Bearer wrong-token"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(correct(token), grpc::StatusCode::UNAUTHENTICATED);  // no scheme
  {
    grpc::ClientContext context;
    auto stream = stub_->CorrectStream(&context);
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(correct("Bearer " + token), grpc::StatusCode::OK);
  EXPECT_EQ(metrics_.Requests(grpc::StatusCode::UNAUTHENTICATED), 4u);
  const metrics::MetricsSnapshot snapshot = metrics_.region.Sum();
  ASSERT_EQ(snapshot.clients.count("frontend"), 1u);
  EXPECT_EQ(snapshot.clients.at("frontend")[0], 1u);
  const std::string exposition = metrics::FormatPrometheus(snapshot, {});
  EXPECT_THAT(exposition,
              HasSubstr("gecd_client_requests_total{client=\"frontend\",code=\"OK\"} 1"));

  // Revoked: the file no longer lists it.
  gecd::testing::WriteTestFile(config_.auth.tokens_file, "# nobody\n");
  EXPECT_TRUE(
      WaitUntil([&] { return correct("Bearer " + token) == grpc::StatusCode::UNAUTHENTICATED; }));
  server_.reset();
  spdlog::set_default_logger(previous);
  EXPECT_THAT(log->str(), HasSubstr("client frontend"));
  EXPECT_THAT(log->str(), Not(HasSubstr(token)));
  EXPECT_THAT(exposition, Not(HasSubstr(token)));
  EXPECT_THAT(exposition, Not(HasSubstr(hash)));
}

TEST_F(GrammarServiceTest, InvalidTextsAreRefusedNamingTheLimit) {
  StartServer();
  CorrectResponse response;
  grpc::Status status = Correct("", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("empty"));
  status = Correct(std::string(101, 'a'), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("server.max_input_chars"));
  EXPECT_EQ(metrics_.Requests(grpc::StatusCode::INVALID_ARGUMENT), 2u);
}

TEST_F(GrammarServiceTest, ControlCharactersAreRefusedAndWhitespaceComesBackUnchanged) {
  StartServer();
  engine_->set_hold(true);  // an answer that needed the engine would never come
  CorrectResponse response;
  grpc::Status status = Correct(std::string("She go\0 home.", 14), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("U+0000 at byte 6"));
  status = Correct(std::string(3, '\0'), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  for (const std::string& text : {std::string(100, ' '), std::string(" \n\t ")}) {
    response.Clear();
    status = Correct(text, &response, std::chrono::seconds(5));
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.corrected_text(), text);
    EXPECT_EQ(response.edits_size(), 0);
    EXPECT_EQ(response.output_tokens(), 0u);
  }
  EXPECT_FALSE(engine_->WaitForHeld(1, std::chrono::milliseconds(100)));
}

// A text of random non-words, which the spelling stage would look up word by word.
std::string NonWords(size_t bytes) {
  std::string text;
  uint32_t state = 12345;
  while (text.size() + 8 < bytes) {
    for (int i = 0; i < 7; ++i) {
      state = state * 1103515245 + 12345;
      text.push_back(static_cast<char>('a' + (state >> 16) % 26));
    }
    text.push_back(' ');
  }
  return text;
}

TEST_F(GrammarServiceTest, SpellingRunsAfterTheCheapChecksAndAdmissionWithinItsCaps) {
  if (!std::filesystem::exists("/usr/share/hunspell/en_US.dic")) {
    GTEST_SKIP() << "Debian package hunspell-en-us not installed";
  }
  const std::string lexicon = model_dir_.path() + "/lexicon.tsv";
  std::ofstream(lexicon) << "friend\t10\n";
  auto spelling = model::SpellCorrector::Create("/usr/share/hunspell/en_US", lexicon, 3);
  ASSERT_TRUE(spelling.ok()) << spelling.status();
  config_.server.max_input_chars = 2000;
  config_.model.max_input_tokens = 100;
  config_.spelling.max_lookups = 3;
  StartServer({.spelling = spelling->get()});
  const auto spelled = [&] { return metrics_.region.Sum().spelling_lookups; };
  CorrectResponse response;

  // Over the token limit as written: answered unchanged and flagged, without a single look-up
  // (a sentence of a whole text the model cannot take must not fail the text).
  const std::string long_sentence = NonWords(2000);
  grpc::Status status = Correct(long_sentence, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.corrected_text(), long_sentence);
  ASSERT_EQ(response.sentences_size(), 1);
  EXPECT_TRUE(response.sentences(0).skipped());
  EXPECT_FALSE(response.sentences(0).changed());
  EXPECT_EQ(response.edits_size(), 0);
  EXPECT_EQ(spelled(), 0u);
  EXPECT_EQ(metrics_.region.Sum().spelling_duration.counts[0], 0u);

  // Not admitted: no spelling work either.
  engine_->set_hold(true);
  std::vector<std::unique_ptr<PendingCall>> admitted;
  for (int i = 0; i < config_.server.max_in_flight; ++i) admitted.push_back(StartCorrect("friend"));
  ASSERT_TRUE(engine_->WaitForHeld(admitted.size()));
  status = Correct(NonWords(80), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(spelled(), 0u);
  engine_->ReleaseNewestFirst();
  for (auto& call : admitted) EXPECT_TRUE(call->Wait().ok());
  engine_->set_hold(false);

  // Admitted: at most spelling.max_lookups look-ups, the rest kept and counted.
  ASSERT_TRUE(Correct(NonWords(80), &response).ok());
  EXPECT_EQ(spelled(), 3u);
  EXPECT_GT(metrics_.region.Sum().spelling_skipped, 0u);
  EXPECT_THAT(FormatPrometheus(metrics_.region.Sum(), {}),
              HasSubstr("gecd_spelling_lookups_total 3"));
  // The speller must outlive the service, whose start queue's threads read it.
  server_.reset();
}

TEST_F(GrammarServiceTest, StreamAnswersAsSentencesFinishWithTheirIds) {
  StartServer();
  engine_->set_hold(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kWait);
  auto stream = stub_->CorrectStream(&context);
  const std::vector<std::string> texts = {"first one", "second one", "third one"};
  for (size_t i = 0; i < texts.size(); ++i) {
    CorrectRequest request;
    request.set_text(texts[i]);
    request.set_request_id(std::to_string(i));
    ASSERT_TRUE(stream->Write(request));
  }
  ASSERT_TRUE(engine_->WaitForHeld(texts.size()));
  // A failing sentence is answered on the stream without ending it.
  CorrectRequest empty;
  empty.set_request_id("empty");
  ASSERT_TRUE(stream->Write(empty));
  CorrectResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), "empty");
  EXPECT_EQ(response.status().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));

  engine_->ReleaseNewestFirst();
  std::vector<std::string> order;
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_TRUE(stream->Read(&response));
    order.push_back(response.request_id());
    EXPECT_EQ(response.status().code(), 0);
    EXPECT_EQ(response.corrected_text(), Expected(texts[std::stoul(response.request_id())]));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"2", "1", "0"}));
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(GrammarServiceTest, StreamStopsReadingAtItsWindow) {
  StartServer({.stream_window = 2});
  engine_->set_hold(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kWait);
  auto stream = stub_->CorrectStream(&context);
  for (int i = 0; i < 5; ++i) {
    CorrectRequest request;
    request.set_text("sentence");
    request.set_request_id(std::to_string(i));
    ASSERT_TRUE(stream->Write(request));
  }
  ASSERT_TRUE(engine_->WaitForHeld(2));
  // Only the window reached the engine; the rest wait in flow control, not in the worker.
  EXPECT_EQ(server_->service().in_flight(), 2);
  engine_->set_hold(false);
  engine_->ReleaseNewestFirst();
  std::vector<std::string> ids;
  CorrectResponse response;
  while (ids.size() < 5) {
    ASSERT_TRUE(stream->Read(&response));
    ids.push_back(response.request_id());
    // An answer's ticket is released just after its reply is written (grammar_service.cc), and
    // the written reply frees the window's slot: the next text may be admitted a moment before
    // that release, so the window plus the one reply still finishing (one delivery thread).
    EXPECT_LE(server_->service().in_flight(), 3);
  }
  EXPECT_THAT(ids, UnorderedElementsAre("0", "1", "2", "3", "4"));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// Engine answers racing the stream's reads and writes from several threads: every sentence of
// every stream is answered exactly once, with its own text's correction.
TEST_F(GrammarServiceTest, StreamAnswersEverySentenceOnceUnderRacingCompletions) {
  engine_ = std::make_unique<FakeEngine>(*tokenizer_, /*delivery_threads=*/4);
  config_.server.max_in_flight = 1000;
  StartServer({.stream_window = 8});
  constexpr int kStreams = 4;
  constexpr int kSentences = 3000;
  std::vector<std::thread> clients;
  std::vector<std::map<std::string, int>> answered(kStreams);
  std::vector<int> mismatched(kStreams, 0);
  // Not vector<bool>: each client thread sets its own element, and vector<bool>'s share a word
  // (a data race ThreadSanitizer reported).
  std::vector<char> finished_ok(kStreams, false);
  for (int s = 0; s < kStreams; ++s) {
    clients.emplace_back([&, s] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + kWait);
      auto stream = stub_->CorrectStream(&context);
      std::thread writer([&] {
        for (int i = 0; i < kSentences; ++i) {
          CorrectRequest request;
          request.set_text(absl::StrCat("s", s, " n", i));
          request.set_request_id(std::to_string(i));
          if (!stream->Write(request)) break;
        }
        stream->WritesDone();
      });
      CorrectResponse response;
      while (stream->Read(&response)) {
        ++answered[s][response.request_id()];
        const std::string text = absl::StrCat("s", s, " n", response.request_id());
        if (response.status().code() != 0 || response.corrected_text() != Expected(text)) {
          ++mismatched[s];
        }
      }
      writer.join();
      finished_ok[s] = stream->Finish().ok();
    });
  }
  for (std::thread& client : clients) client.join();
  for (int s = 0; s < kStreams; ++s) {
    EXPECT_TRUE(finished_ok[s]) << "stream " << s;
    EXPECT_EQ(mismatched[s], 0) << "stream " << s;
    int unanswered = 0, repeated = 0;
    for (int i = 0; i < kSentences; ++i) {
      const auto it = answered[s].find(std::to_string(i));
      if (it == answered[s].end()) {
        ++unanswered;
      } else if (it->second != 1) {
        ++repeated;
      }
    }
    EXPECT_EQ(unanswered, 0) << "stream " << s;
    EXPECT_EQ(repeated, 0) << "stream " << s;
    EXPECT_EQ(answered[s].size(), static_cast<size_t>(kSentences)) << "stream " << s;
  }
  // Released just after the reply's bookkeeping (see GrammarService::ProcessSentences).
  EXPECT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
}

TEST_F(GrammarServiceTest, BeyondMaxInFlightIsRefusedWhileAdmittedComplete) {
  StartServer();
  engine_->set_hold(true);
  std::vector<std::unique_ptr<PendingCall>> admitted;
  for (int i = 0; i < config_.server.max_in_flight; ++i) admitted.push_back(StartCorrect("ok"));
  ASSERT_TRUE(engine_->WaitForHeld(admitted.size()));
  CorrectResponse response;
  const grpc::Status refused = Correct("one more", &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("server.max_in_flight"));
  engine_->ReleaseNewestFirst();
  for (auto& call : admitted) {
    EXPECT_TRUE(call->Wait().ok());
    EXPECT_EQ(call->response.corrected_text(), Expected("ok"));
  }
  // Admission is released: a new request passes.
  engine_->set_hold(false);
  EXPECT_TRUE(Correct("again", &response).ok());
}

TEST_F(GrammarServiceTest, OverloadIsRefusedAtOnceWhenThePredictedTimeExceedsTheBudget) {
  config_.server.max_in_flight = 1000;
  config_.server.slo_p99_ms = 800;
  std::atomic<int64_t> now_us{1'000'000};
  StartServer({.admission_clock = [&] { return now_us.load(); }});
  // One sentence served in 100 ms alone: the same sentence with k others in flight is predicted
  // to take (k + 1) * 100 ms, since each step runs them all.
  engine_->set_hold(true);
  auto first = StartCorrect("ok");
  ASSERT_TRUE(engine_->WaitForHeld(1));
  now_us += 100'000;
  engine_->ReleaseNewestFirst();
  ASSERT_TRUE(first->Wait().ok());
  // Its admission is given back just after the reply (see GrammarService::ProcessSentences).
  ASSERT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));

  // Behind three, 400 ms: one with a 250 ms deadline is refused at once.
  std::vector<std::unique_ptr<PendingCall>> admitted;
  for (int i = 0; i < 3; ++i) admitted.push_back(StartCorrect("ok"));
  ASSERT_TRUE(engine_->WaitForHeld(3));
  CorrectResponse response;
  grpc::Status refused = Correct("ok", &response, std::chrono::milliseconds(250));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("deadline"));
  // Without a tight deadline the objective holds: eight in all (800 ms), not nine; a client
  // whose own deadline is looser than the objective gets no more.
  for (int i = 0; i < 5; ++i) admitted.push_back(StartCorrect("ok"));
  ASSERT_TRUE(engine_->WaitForHeld(8));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  CorrectRequest request;
  request.set_text("ok");
  refused = stub_->Correct(&context, request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("predicted 900 ms (8 sentences in flight"));
  EXPECT_THAT(refused.error_message(), HasSubstr("server.slo_p99_ms"));
  // The refusal says when to come back: about one sentence's share of the excess, ±50%.
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto pushback = trailers.find("grpc-retry-pushback-ms");
  ASSERT_NE(pushback, trailers.end());
  const int pushback_ms = std::stoi(std::string(pushback->second.data(), pushback->second.size()));
  EXPECT_GE(pushback_ms, 50);
  EXPECT_LE(pushback_ms, 150);
  EXPECT_EQ(server_->service().in_flight(), 8);
  const MetricsSnapshot snapshot = metrics_.region.Sum();
  EXPECT_EQ(snapshot.shed[ProcessMetrics::kShedDeadline][ProcessMetrics::kShedInteractive], 1u);
  EXPECT_EQ(snapshot.shed[ProcessMetrics::kShedSlo][ProcessMetrics::kShedInteractive], 1u);
  EXPECT_EQ(metrics_.Requests(grpc::StatusCode::RESOURCE_EXHAUSTED), 2u);

  now_us += 800'000;
  engine_->ReleaseNewestFirst();
  for (auto& call : admitted) EXPECT_TRUE(call->Wait().ok());
  // Released just after the reply's bookkeeping (see GrammarService::ProcessSentences).
  EXPECT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
}

// Under overload most calls are refusals, so a refusal must cost no validation or tokenization:
// admission decides on the text's length before anything reads it.
TEST_F(GrammarServiceTest, ARefusalIsDecidedBeforeTheTextIsRead) {
  config_.server.max_in_flight = 1;
  StartServer();
  engine_->set_hold(true);
  auto held = StartCorrect("ok");
  ASSERT_TRUE(engine_->WaitForHeld(1));
  CorrectResponse response;
  // Invalid UTF-8 would be INVALID_ARGUMENT once read; at the in-flight limit it is not read.
  gecd::internal::CorrectRequest bad;
  bad.set_text("caf\xc3 ok");
  std::string response_bytes;
  const grpc::Status refused =
      GenericUnary("/gecd.v1.GrammarCorrection/Correct", bad.SerializeAsString(), &response_bytes);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  engine_->ReleaseNewestFirst();
  EXPECT_TRUE(held->Wait().ok());
  // (The reply reaches the client just before its sentence leaves admission.)
  ASSERT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
  // Admitted, it is read and refused for what it is; the admission is given back.
  const grpc::Status invalid =
      GenericUnary("/gecd.v1.GrammarCorrection/Correct", bad.SerializeAsString(), &response_bytes);
  EXPECT_EQ(invalid.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Released just after the reply's bookkeeping (see GrammarService::ProcessSentences).
  EXPECT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
  engine_->set_hold(false);
  EXPECT_TRUE(Correct("again", &response).ok());
}

// gRPC reads a connection's next call only once the handler of the one before has returned, so
// an admitted sentence's start (validation, spelling, tokenization, submission) runs elsewhere:
// under overload a refusal must not wait behind it on the same connection (session 25: refusals'
// p99 36-48 ms at 2x overload, 2.0-2.5 ms of it once started off gRPC's threads).
TEST_F(GrammarServiceTest, ARefusalIsNotHeldBehindAnAdmittedSentencesStart) {
  // Within admission's start window (no answer has come yet), and more than gRPC has threads
  // to run handlers on here.
  constexpr int kAdmitted = 16;
  static_assert(kAdmitted <= AdmissionController::kStartWindow);
  config_.server.max_in_flight = kAdmitted;
  StartServer();
  engine_->set_block_submits(true);
  absl::Cleanup unblock = [this] { engine_->set_block_submits(false); };
  std::vector<std::unique_ptr<PendingCall>> admitted;
  for (int i = 0; i < kAdmitted; ++i) admitted.push_back(StartCorrect("ok"));
  ASSERT_TRUE(engine_->WaitForBlockedSubmits(1));
  ASSERT_TRUE(WaitUntil([&] { return server_->service().in_flight() == kAdmitted; }));
  // The same channel, so the same connection as the admitted calls.
  CorrectResponse response;
  const grpc::Status refused = Correct("one more", &response, std::chrono::seconds(3));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("server.max_in_flight"));
  std::move(unblock).Invoke();
  for (auto& call : admitted) {
    EXPECT_TRUE(call->Wait().ok());
    EXPECT_EQ(call->response.corrected_text(), Expected("ok"));
  }
}

// A sentence cancelled while it waits for its start is answered at once and never submitted;
// its admission is given back.
TEST_F(GrammarServiceTest, ACallCancelledBeforeItsSentenceStartsIsNotSubmitted) {
  StartServer();
  engine_->set_block_submits(true);
  absl::Cleanup unblock = [this] { engine_->set_block_submits(false); };
  auto first = StartCorrect("first");
  ASSERT_TRUE(engine_->WaitForBlockedSubmits(1));
  // Queued behind the first one's start.
  auto second = StartCorrect("second");
  ASSERT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 2; }));
  second->context.TryCancel();
  EXPECT_EQ(second->Wait().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 1; }));
  std::move(unblock).Invoke();
  EXPECT_TRUE(first->Wait().ok());
  ASSERT_EQ(engine_->Submitted().size(), 1u);
  EXPECT_EQ(tokenizer_->Decode(engine_->Submitted()[0].prompt), "first");
}

// The batch class waits for the room interactive work leaves (kBatchShare of the objective)
// instead of being refused, and is answered once room appears; interactive sentences are still
// admitted up to the whole objective meanwhile.
TEST_F(GrammarServiceTest, BatchSentencesWaitForRoomThatInteractiveLeaves) {
  config_.server.max_in_flight = 1000;
  config_.server.slo_p99_ms = 800;
  std::atomic<int64_t> now_us{1'000'000};
  StartServer({.admission_clock = [&] { return now_us.load(); }});
  engine_->set_hold(true);
  auto first = StartCorrect("ok");  // alone in 100 ms: k ahead predict (k + 1) * 100 ms
  ASSERT_TRUE(engine_->WaitForHeld(1));
  now_us += 100'000;
  engine_->ReleaseNewestFirst();
  ASSERT_TRUE(first->Wait().ok());
  // Its admission is given back just after the reply (see GrammarService::ProcessSentences).
  ASSERT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));

  std::vector<std::unique_ptr<PendingCall>> interactive;
  for (int i = 0; i < 6; ++i) interactive.push_back(StartCorrect("ok"));
  ASSERT_TRUE(engine_->WaitForHeld(6));
  // A seventh batch sentence would take 700 ms, past the 600 ms batch may fill: it waits.
  std::unique_ptr<PendingCall> batch = StartCorrect("ok", kWait, "batch");
  EXPECT_FALSE(batch->WaitFor(std::chrono::milliseconds(200)).has_value());
  // An interactive one still fits the objective (700 <= 800).
  interactive.push_back(StartCorrect("ok"));
  ASSERT_TRUE(engine_->WaitForHeld(7));
  EXPECT_EQ(server_->service().in_flight(), 7);

  // Room appears as the engine answers: the batch sentence starts and is answered.
  engine_->set_hold(false);
  now_us += 700'000;
  engine_->ReleaseNewestFirst();
  for (auto& call : interactive) EXPECT_TRUE(call->Wait().ok());
  EXPECT_TRUE(batch->Wait().ok());
  EXPECT_EQ(batch->response.corrected_text(), Expected("ok"));
  // Released just after the reply's bookkeeping (see GrammarService::ProcessSentences): wait,
  // or a release after the test would read now_us through the admission clock once it is gone.
  EXPECT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
}

TEST_F(GrammarServiceTest, EngineRequestsCarryTheirDueTimeAndDeadline) {
  StartServer();  // server.slo_p99_ms 1000
  CorrectResponse response;
  EXPECT_TRUE(Correct("first", &response).ok());  // something for admission to predict from
  // Interactive, 5 s deadline: due by the objective, dropped unstarted after 5 s.
  EXPECT_TRUE(Correct("interactive", &response, std::chrono::seconds(5)).ok());
  // Batch, 30 s deadline: due ten objectives after arrival.
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    CorrectRequest request;
    request.set_text("batch");
    request.set_priority("batch");
    EXPECT_TRUE(stub_->Correct(&context, request, &response).ok());
  }
  // No deadline at all: due by the objective, never dropped.
  {
    grpc::ClientContext context;
    CorrectRequest request;
    request.set_text("no deadline");
    EXPECT_TRUE(stub_->Correct(&context, request, &response).ok());
  }
  // A deadline a century away: due by the objective, its deadline kept (as far as the wire
  // carries it) without overflow.
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100));
    CorrectRequest request;
    request.set_text("far future");
    EXPECT_TRUE(stub_->Correct(&context, request, &response).ok());
  }
  const std::vector<EngineRequest> submitted = engine_->Submitted();
  ASSERT_EQ(submitted.size(), 5u);
  auto seconds = [](int64_t us) { return static_cast<double>(us) * 1e-6; };
  const EngineRequest& interactive = submitted[1];
  EXPECT_EQ(interactive.due_us - interactive.arrival_us, 1'000'000);
  EXPECT_NEAR(seconds(interactive.deadline_us - interactive.arrival_us), 5, 0.5);
  const EngineRequest& batch = submitted[2];
  EXPECT_EQ(batch.due_us - batch.arrival_us, 10'000'000);
  EXPECT_NEAR(seconds(batch.deadline_us - batch.arrival_us), 30, 0.5);
  const EngineRequest& patient = submitted[3];
  EXPECT_EQ(patient.due_us - patient.arrival_us, 1'000'000);
  EXPECT_EQ(patient.deadline_us, 0);
  const EngineRequest& far = submitted[4];
  EXPECT_EQ(far.due_us - far.arrival_us, 1'000'000);
  // gRPC's grpc-timeout header carries at most 8 digits of a unit (here 27,000 hours).
  EXPECT_GT(seconds(far.deadline_us - far.arrival_us), 90'000'000);
}

TEST_F(GrammarServiceTest, AnUnknownPriorityIsInvalidArgumentNamingIt) {
  StartServer();
  CorrectResponse response;
  {
    grpc::ClientContext context;
    CorrectRequest request;
    request.set_text("ok");
    request.set_priority("urgent");
    const grpc::Status status = stub_->Correct(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                HasSubstr("priority 'urgent' (the request's priority field) is not one of: "
                          "interactive, batch"));
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("x-gecd-priority", "low");
    CorrectRequest request;
    request.set_text("ok");
    const grpc::Status status = stub_->Correct(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("'low' (the x-gecd-priority metadata)"));
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("x-gecd-priority", "batch");
    CorrectRequest request;
    request.set_text("ok");
    request.set_priority("interactive");  // the field wins
    EXPECT_TRUE(stub_->Correct(&context, request, &response).ok());
  }
}

TEST_F(GrammarServiceTest, InvalidUtf8ReachesTheValidator) {
  StartServer();
  // What a client whose `text` is bytes sends; the public message is a string, so the test
  // serializes the server's own wire message and sends it raw.
  gecd::internal::CorrectRequest request;
  request.set_text("caf\xc3 ok");
  std::string response_bytes;
  const grpc::Status status = GenericUnary("/gecd.v1.GrammarCorrection/Correct",
                                           request.SerializeAsString(), &response_bytes);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("UTF-8"));
}

TEST_F(GrammarServiceTest, DeadlineCancelsTheEngineRequest) {
  StartServer();
  engine_->set_hold(true);
  // Long enough for the request to reach the engine on a loaded machine.
  auto call = StartCorrect("too slow", std::chrono::seconds(2));
  ASSERT_TRUE(engine_->WaitForHeld(1));
  EXPECT_EQ(call->Wait().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(engine_->WaitForCancelled(1));
}

TEST_F(GrammarServiceTest, ClientCancellationCancelsTheEngineRequest) {
  StartServer();
  engine_->set_hold(true);
  auto call = StartCorrect("never mind");
  ASSERT_TRUE(engine_->WaitForHeld(1));
  call->context.TryCancel();
  EXPECT_EQ(call->Wait().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(engine_->WaitForCancelled(1));
}

TEST_F(GrammarServiceTest, EngineNotReadyIsUnavailable) {
  engine_->set_ready(false);
  StartServer();
  CorrectResponse response;
  EXPECT_EQ(Correct("hello", &response).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(GrammarServiceTest, HealthFollowsEngineReadiness) {
  engine_->set_ready(false);
  StartServer();
  EXPECT_TRUE(WaitForHealth(2));
  engine_->set_ready(true);
  EXPECT_TRUE(WaitForHealth(1));
  engine_->set_ready(false);
  EXPECT_TRUE(WaitForHealth(2));
}

// A grpc.health.v1 Watch stream for one service: records each status the server sends.
class HealthWatch : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  HealthWatch(grpc::GenericStub& stub, const std::string& service) {
    grpc::Slice slice(
        absl::StrCat("\x0a", std::string(1, static_cast<char>(service.size())), service));
    request_ = grpc::ByteBuffer(&slice, 1);
    stub.PrepareBidiStreamingCall(&context_, "/grpc.health.v1.Health/Watch", grpc::StubOptions(),
                                  this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&response_);
    StartCall();
  }
  ~HealthWatch() override {
    context_.TryCancel();
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return done_; });
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (response_.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) bytes.append(s.begin(), s.end());
    }
    {
      std::lock_guard lock(mu_);
      statuses_.push_back(bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : 0);
    }
    changed_.notify_all();
    StartRead(&response_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard lock(mu_);
    done_ = true;
    changed_.notify_all();
  }
  // Waits for the last status received to be `want` (1 SERVING, 2 NOT_SERVING).
  bool WaitFor(int want) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, kWait,
                             [&] { return !statuses_.empty() && statuses_.back() == want; });
  }

 private:
  grpc::ClientContext context_;
  grpc::ByteBuffer request_, response_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<int> statuses_;
  bool done_ = false;
};

TEST_F(GrammarServiceTest, HealthWatchFollowsTheServiceByName) {
  engine_->set_ready(false);
  StartServer();
  grpc::GenericStub stub(channel_);
  HealthWatch watch(stub, "gecd.v1.GrammarCorrection");
  EXPECT_TRUE(watch.WaitFor(2));
  engine_->set_ready(true);
  EXPECT_TRUE(watch.WaitFor(1));
  engine_->set_ready(false);
  EXPECT_TRUE(watch.WaitFor(2));
  engine_->set_ready(true);
  EXPECT_TRUE(watch.WaitFor(1));
  // A call just now: the drain then lasts server.drain_quiet_ms (500 ms) before the port closes.
  CorrectResponse response;
  ASSERT_TRUE(Correct("hello", &response).ok());
  std::thread drain([&] { server_->Drain(std::chrono::seconds(3)); });
  EXPECT_TRUE(watch.WaitFor(2));
  drain.join();
}

// Probes and proxies configured with the service name (Kubernetes' gRPC probe, Envoy) ask for
// gecd.v1.GrammarCorrection: it follows the engine (NOT_SERVING while it restarts) and the
// drain like "", where it was once NOT_FOUND.
TEST_F(GrammarServiceTest, HealthAnswersForTheServiceByName) {
  const std::string name = "gecd.v1.GrammarCorrection";
  engine_->set_ready(false);
  StartServer();
  EXPECT_TRUE(WaitForHealth(2, name));
  engine_->set_ready(true);
  EXPECT_TRUE(WaitForHealth(1, name));
  engine_->set_ready(false);  // the engine process restarting
  EXPECT_TRUE(WaitForHealth(2, name));
  engine_->set_ready(true);
  EXPECT_TRUE(WaitForHealth(1, name));
  std::string unknown;
  EXPECT_EQ(GenericUnary("/grpc.health.v1.Health/Check", "\x0a\x07unknown", &unknown).error_code(),
            grpc::StatusCode::NOT_FOUND);

  // Draining: NOT_SERVING for the name while calls are still answered (the quiet period).
  config_.server.drain_quiet_ms = 60000;
  server_.reset();
  StartServer();
  ASSERT_TRUE(WaitForHealth(1, name));
  // A call just now: the drain then waits out the quiet period (here: the 3 s grace).
  CorrectResponse response;
  ASSERT_TRUE(Correct("hello", &response).ok());
  std::thread drain([&] { server_->Drain(std::chrono::seconds(3)); });
  EXPECT_TRUE(WaitForHealth(2, name));
  EXPECT_EQ(HealthStatus(), 2);
  drain.join();
}

TEST_F(GrammarServiceTest, DrainAnswersAdmittedRequests) {
  StartServer();
  engine_->set_hold(true);
  auto call = StartCorrect("in flight");
  ASSERT_TRUE(engine_->WaitForHeld(1));
  std::thread drain([&] { server_->Drain(kWait); });
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (!server_->service().draining() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(server_->service().draining());
  engine_->ReleaseNewestFirst();
  EXPECT_TRUE(call->Wait().ok());
  drain.join();
}

TEST_F(GrammarServiceTest, DrainFinishesOpenStreamsWithUnavailable) {
  config_.server.drain_quiet_ms = 0;
  StartServer();
  // One idle stream, one with a sentence in the engine.
  grpc::ClientContext idle_context, busy_context;
  idle_context.set_deadline(std::chrono::system_clock::now() + kWait);
  busy_context.set_deadline(std::chrono::system_clock::now() + kWait);
  auto idle = stub_->CorrectStream(&idle_context);
  auto busy = stub_->CorrectStream(&busy_context);
  engine_->set_hold(true);
  CorrectRequest request;
  request.set_text("in flight");
  request.set_request_id("b");
  ASSERT_TRUE(busy->Write(request));
  ASSERT_TRUE(engine_->WaitForHeld(1));
  ASSERT_TRUE(WaitUntil([&] { return server_->service().open_streams() == 2; }));

  const auto started = std::chrono::steady_clock::now();
  std::thread drain([&] { server_->Drain(kWait); });
  // The idle stream ends at once, UNAVAILABLE (retry elsewhere), not CANCELLED at the grace
  // period's end.
  CorrectResponse response;
  EXPECT_FALSE(idle->Read(&response));
  const grpc::Status idle_status = idle->Finish();
  EXPECT_EQ(idle_status.error_code(), grpc::StatusCode::UNAVAILABLE) << idle_status.error_message();
  // The busy one gets its answer first.
  engine_->ReleaseNewestFirst();
  ASSERT_TRUE(busy->Read(&response));
  EXPECT_EQ(response.request_id(), "b");
  EXPECT_EQ(response.status().code(), 0);
  EXPECT_FALSE(busy->Read(&response));
  EXPECT_EQ(busy->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  drain.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, kWait / 2);
  EXPECT_EQ(server_->service().open_streams(), 0);
}

// Calls that keep coming while the worker drains get UNAVAILABLE (clients retry it elsewhere),
// never CANCELLED: the gRPC server shuts down (cancelling whatever reaches it then) only once
// they have stopped for server.drain_quiet_ms.
TEST_F(GrammarServiceTest, DrainAnswersUnavailableUntilCallsStopNeverCancelled) {
  // 0, i.e. shutting down once nothing runs: ~8 CANCELLED. The quiet period must also outlast
  // a call's trip from the client thread to the service, which ThreadSanitizer on a busy box
  // has stretched past 200 ms.
  config_.server.drain_quiet_ms = 1000;
  StartServer();
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<grpc::StatusCode, int> codes;
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&] {
      while (!stop.load()) {
        CorrectResponse response;
        const grpc::Status status = Correct("hello", &response, std::chrono::seconds(10));
        std::lock_guard lock(mu);
        ++codes[status.error_code()];
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::thread drain([&] { server_->Drain(kWait); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  for (std::thread& client : clients) client.join();
  drain.join();
  std::string seen;
  for (const auto& [code, n] : codes) absl::StrAppend(&seen, static_cast<int>(code), ":", n, " ");
  EXPECT_EQ(codes.count(grpc::StatusCode::CANCELLED), 0u) << seen;
  EXPECT_GT(codes[grpc::StatusCode::OK], 0) << seen;
  EXPECT_GT(codes[grpc::StatusCode::UNAVAILABLE], 0) << seen;
}

TEST_F(GrammarServiceTest, ReflectionListsTheService) {
  StartServer();
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kWait);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  const auto step = [&](int want) {
    ASSERT_TRUE(cq.Next(&tag, &ok));
    ASSERT_TRUE(ok);
    ASSERT_EQ(tag, reinterpret_cast<void*>(want));
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  // ServerReflectionRequest{list_services = "*"} (field 7, a string).
  grpc::Slice slice(std::string("\x3a\x01*", 3));
  grpc::ByteBuffer request(&slice, 1), response;
  call->Write(request, reinterpret_cast<void*>(2));
  step(2);
  call->Read(&response, reinterpret_cast<void*>(3));
  step(3);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(s.begin(), s.end());
  EXPECT_THAT(bytes, HasSubstr("gecd.v1.GrammarCorrection"));
  EXPECT_THAT(bytes, HasSubstr("grpc.health.v1.Health"));
  context.TryCancel();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// --- Whole texts: sentences fanned out to the engine and merged back ---

// `text` with `edits` applied, where the edits count offsets in `unit`: the text is converted
// to that unit's code units, edited there and converted back, as a client in that language
// would.
std::u32string CodePointsOf(std::string_view text) {
  std::u32string out;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? c : c & (0x3F >> (n - 1));
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}
std::string Utf8Of(std::u32string_view cps) {
  std::string out;
  for (char32_t c : cps) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    } else if (c < 0x10000) {
      out += {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
              static_cast<char>(0x80 | (c & 0x3F))};
    } else {
      out += {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
              static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    }
  }
  return out;
}
std::u16string Utf16Of(std::u32string_view cps) {
  std::u16string out;
  for (char32_t c : cps) {
    if (c < 0x10000) {
      out.push_back(static_cast<char16_t>(c));
    } else {
      out.push_back(static_cast<char16_t>(0xD800 + ((c - 0x10000) >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + ((c - 0x10000) & 0x3FF)));
    }
  }
  return out;
}
std::u32string CodePointsOf(std::u16string_view units) {
  std::u32string out;
  for (size_t i = 0; i < units.size(); ++i) {
    if (units[i] >= 0xD800 && units[i] < 0xDC00) {
      out.push_back(0x10000 + ((char32_t{units[i]} - 0xD800) << 10) + (units[i + 1] - 0xDC00));
      ++i;
    } else {
      out.push_back(units[i]);
    }
  }
  return out;
}
// The edits applied back to front in a string of the unit's code units.
template <typename String>
String ApplyIn(String units, const CorrectResponse& response,
               const std::function<String(std::string_view)>& convert) {
  for (int i = response.edits_size() - 1; i >= 0; --i) {
    const gecd::v1::Edit& e = response.edits(i);
    units.replace(e.start(), e.end() - e.start(), convert(e.replacement()));
  }
  return units;
}
std::string ApplyInUnit(std::string_view text, const CorrectResponse& response,
                        gecd::v1::OffsetUnit unit) {
  switch (unit) {
    case gecd::v1::OFFSET_UNIT_CODE_POINTS:
      return Utf8Of(ApplyIn<std::u32string>(CodePointsOf(text), response,
                                            [](std::string_view s) { return CodePointsOf(s); }));
    case gecd::v1::OFFSET_UNIT_UTF16_CODE_UNITS:
      return Utf8Of(CodePointsOf(
          ApplyIn<std::u16string>(Utf16Of(CodePointsOf(text)), response,
                                  [](std::string_view s) { return Utf16Of(CodePointsOf(s)); })));
    default:
      return ApplyIn<std::string>(std::string(text), response,
                                  [](std::string_view s) { return std::string(s); });
  }
}
// The span [start, end) of the original in the unit, as UTF-8.
std::string SpanInUnit(std::string_view text, uint32_t start, uint32_t end,
                       gecd::v1::OffsetUnit unit) {
  switch (unit) {
    case gecd::v1::OFFSET_UNIT_CODE_POINTS:
      return Utf8Of(CodePointsOf(text).substr(start, end - start));
    case gecd::v1::OFFSET_UNIT_UTF16_CODE_UNITS:
      return Utf8Of(CodePointsOf(Utf16Of(CodePointsOf(text)).substr(start, end - start)));
    default:
      return std::string(text.substr(start, end - start));
  }
}

grpc::Status CorrectWith(gecd::v1::GrammarCorrection::Stub& stub, const CorrectRequest& request,
                         CorrectResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kWait);
  return stub.Correct(&context, request, response);
}

TEST_F(GrammarServiceTest, AWholeTextIsCorrectedSentenceBySentenceAndMergedInPlace) {
  config_.server.max_input_chars = 1000;
  // A text's sentences are admitted together: room for several texts' worth (a reply reaches
  // the client before its last sentence has left admission).
  config_.server.max_in_flight = 64;
  StartServer();
  const std::string text = "  she go home. He are here!\n\nTHEY ARE FINE.\r\nok then ";
  CorrectResponse response;
  ASSERT_TRUE(Correct(text, &response).ok());
  // Each sentence is its own engine sequence, as written without the whitespace around it.
  std::vector<std::string> prompts;
  for (const EngineRequest& r : engine_->Submitted())
    prompts.push_back(tokenizer_->Decode(r.prompt));
  EXPECT_THAT(prompts,
              UnorderedElementsAre("she go home.", "He are here!", "THEY ARE FINE.", "ok then"));
  // Every correction in its place; the whitespace between sentences untouched.
  EXPECT_EQ(response.corrected_text(), "  SHE GO HOME. HE ARE HERE!\n\nTHEY ARE FINE.\r\nOK THEN ");
  ASSERT_EQ(response.sentences_size(), 4);
  const std::vector<std::pair<uint32_t, uint32_t>> spans = {{2, 14}, {15, 27}, {29, 43}, {45, 52}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(response.sentences(i).start(), spans[i].first) << i;
    EXPECT_EQ(response.sentences(i).end(), spans[i].second) << i;
    EXPECT_EQ(response.sentences(i).changed(), i != 2) << i;
    EXPECT_FALSE(response.sentences(i).skipped());
  }
  std::vector<gecd::text::TextEdit> edits;
  for (const auto& e : response.edits()) {
    edits.push_back({e.start(), e.end(), e.replacement()});
    const auto& sentence = response.sentences(static_cast<int>(e.sentence()));
    EXPECT_GE(e.start(), sentence.start());
    EXPECT_LE(e.end(), sentence.end());
  }
  EXPECT_EQ(gecd::text::ApplyEdits(text, edits), response.corrected_text());
  EXPECT_EQ(response.prompt_tokens(), 12u + 12u + 14u + 7u);  // byte-level: one token a byte
}

TEST_F(GrammarServiceTest, OffsetsComeInTheRequestedUnitForEmojiCjkCombiningMarksAndCrlf) {
  config_.server.max_input_chars = 1000;
  // A text's sentences are admitted together: room for several texts' worth (a reply reaches
  // the client before its last sentence has left admission).
  config_.server.max_in_flight = 64;
  StartServer();
  // A sentence ends after the emoji (4 UTF-8 bytes, 2 UTF-16 units), one after CJK (3 bytes
  // each), one after a combining mark (e + U+0301), and CRLF line ends between them.
  const std::string text =
      "I like caf\u00e9 \U0001F600 a lot.\r\nIt is \u65e5\u672c\u8a9e ok.\r\n\r\nNe\u0301e "
      "is here. \U0001F44D\U0001F3FD Fine.";
  for (const auto unit : {gecd::v1::OFFSET_UNIT_UTF8_BYTES, gecd::v1::OFFSET_UNIT_CODE_POINTS,
                          gecd::v1::OFFSET_UNIT_UTF16_CODE_UNITS}) {
    CorrectRequest request;
    request.set_text(text);
    request.set_offset_unit(unit);
    CorrectResponse response;
    ASSERT_TRUE(CorrectWith(*stub_, request, &response).ok());
    EXPECT_EQ(ApplyInUnit(text, response, unit), response.corrected_text()) << unit;
    ASSERT_EQ(response.sentences_size(), 4) << unit;
    EXPECT_EQ(SpanInUnit(text, response.sentences(0).start(), response.sentences(0).end(), unit),
              "I like caf\u00e9 \U0001F600 a lot.");
    EXPECT_EQ(SpanInUnit(text, response.sentences(3).start(), response.sentences(3).end(), unit),
              "\U0001F44D\U0001F3FD Fine.");
    EXPECT_FALSE(response.edits().empty());
  }
}

TEST_F(GrammarServiceTest, AnUnknownOffsetUnitIsInvalidArgumentNamingTheField) {
  StartServer();
  CorrectRequest request;
  request.set_text("fine.");
  request.set_offset_unit(static_cast<gecd::v1::OffsetUnit>(7));
  CorrectResponse response;
  const grpc::Status status = CorrectWith(*stub_, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("offset_unit 7"));
  EXPECT_TRUE(engine_->Submitted().empty());
}

TEST_F(GrammarServiceTest, ASentenceOverTheTokenLimitComesBackUnchangedAndFlagged) {
  config_.server.max_input_chars = 1000;
  // A text's sentences are admitted together: room for several texts' worth (a reply reaches
  // the client before its last sentence has left admission).
  config_.server.max_in_flight = 64;
  config_.model.max_input_tokens = 40;
  StartServer();
  const std::string long_sentence(60, 'x');
  const std::string text = "She is here. X" + long_sentence + ". Ok.";
  CorrectResponse response;
  ASSERT_TRUE(Correct(text, &response).ok());
  EXPECT_EQ(response.corrected_text(), "SHE IS HERE. X" + long_sentence + ". OK.");
  ASSERT_EQ(response.sentences_size(), 3);
  EXPECT_TRUE(response.sentences(1).skipped());
  EXPECT_FALSE(response.sentences(1).changed());
  EXPECT_FALSE(response.sentences(0).skipped());
  EXPECT_EQ(engine_->Submitted().size(), 2u);
}

TEST_F(GrammarServiceTest, BadInputInAWholeTextNamesItsByteInTheText) {
  config_.server.max_input_chars = 1000;
  // A text's sentences are admitted together: room for several texts' worth (a reply reaches
  // the client before its last sentence has left admission).
  config_.server.max_in_flight = 64;
  StartServer();
  CorrectResponse response;
  grpc::Status status = Correct(std::string("Fine here. Bad\0 one.", 20), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("U+0000 at byte 14"));
  // Only punctuation, mixed scripts, and no sentence end at all are fine.
  for (const std::string text :
       {"?!...", "\u041f\u0440\u0438\u0432\u0435\u0442 world \u4f60\u597d", "no end here"}) {
    ASSERT_TRUE(Correct(text, &response).ok()) << text;
    EXPECT_EQ(response.sentences_size(), 1) << text;
  }
}

TEST_F(GrammarServiceTest, TheSentenceCacheAnswersReSentSentencesWithoutTheEngine) {
  config_.server.max_input_chars = 1000;
  // A text's sentences are admitted together: room for several texts' worth (a reply reaches
  // the client before its last sentence has left admission).
  config_.server.max_in_flight = 64;
  config_.server.sentence_cache_mb = 1;
  StartServer();
  const std::string text = "She go home. He are here. They is fine.";
  CorrectResponse first, second;
  ASSERT_TRUE(Correct(text, &first).ok());
  EXPECT_EQ(engine_->Submitted().size(), 3u);
  // Sent again with one sentence changed: only that one reaches the engine.
  const std::string edited = "She go home. He is here. They is fine.";
  ASSERT_TRUE(Correct(edited, &second).ok());
  ASSERT_EQ(engine_->Submitted().size(), 4u);
  EXPECT_EQ(tokenizer_->Decode(engine_->Submitted().back().prompt), "He is here.");
  EXPECT_EQ(second.corrected_text(), "SHE GO HOME. HE IS HERE. THEY IS FINE.");
  ASSERT_EQ(second.sentences_size(), 3);
  EXPECT_TRUE(second.sentences(0).cached());
  EXPECT_FALSE(second.sentences(1).cached());
  EXPECT_TRUE(second.sentences(2).cached());
  EXPECT_TRUE(second.sentences(0).changed());
  const MetricsSnapshot snapshot = metrics_.region.Sum();
  EXPECT_EQ(snapshot.sentence_cache_hits, 2u);
  EXPECT_EQ(snapshot.sentence_cache_misses, 4u);
  EXPECT_THAT(FormatPrometheus(snapshot, {}), HasSubstr("gecd_sentence_cache_hits_total 2"));
  // cache: false sends every sentence to the engine.
  CorrectRequest request;
  request.set_text(text);
  request.set_cache(false);
  CorrectResponse bypassed;
  ASSERT_TRUE(CorrectWith(*stub_, request, &bypassed).ok());
  EXPECT_EQ(engine_->Submitted().size(), 7u);
  EXPECT_EQ(bypassed.corrected_text(), first.corrected_text());
  for (const auto& sentence : bypassed.sentences()) EXPECT_FALSE(sentence.cached());
}

TEST_F(GrammarServiceTest, OneFailedSentenceFailsTheTextAndCancelsTheOthers) {
  config_.server.max_input_chars = 1000;
  // A text's sentences are admitted together: room for several texts' worth (a reply reaches
  // the client before its last sentence has left admission).
  config_.server.max_in_flight = 64;
  StartServer();
  engine_->set_hold(true);
  auto call = StartCorrect("One. Two. Three.");
  ASSERT_TRUE(engine_->WaitForHeld(3));
  engine_->FailHeld(1, absl::InternalError("the engine failed"));  // "Two."
  const grpc::Status status = call->Wait();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_TRUE(engine_->WaitForCancelled(2));  // "One." and "Three."
  EXPECT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
}

TEST_F(GrammarServiceTest, ATextIsAdmittedWholeOrRefusedWhole) {
  config_.server.max_input_chars = 1000;
  config_.server.max_in_flight = 2;
  StartServer();
  CorrectResponse response;
  ASSERT_TRUE(Correct("Fine.", &response).ok());  // admission has an estimate from now on
  ASSERT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
  engine_->set_hold(true);
  auto first = StartCorrect("Held.");
  ASSERT_TRUE(engine_->WaitForHeld(1));
  // One in flight, room for one more: a text of three is refused whole, none of it submitted.
  const size_t submitted = engine_->Submitted().size();
  const grpc::Status status = Correct("One. Two. Three.", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("a text of 3 sentences"));
  EXPECT_EQ(engine_->Submitted().size(), submitted);
  EXPECT_EQ(server_->service().in_flight(), 1);
  engine_->ReleaseNewestFirst();
  EXPECT_TRUE(first->Wait().ok());
  // With nothing ahead, a text is let in whatever its size (or it could never be answered).
  // (The reply reaches the client before its sentence has left admission.)
  ASSERT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
  engine_->set_hold(false);
  ASSERT_TRUE(Correct("One. Two. Three.", &response).ok());
  EXPECT_EQ(response.corrected_text(), "ONE. TWO. THREE.");
}

// CorrectStream with stream_sentences: one sentence answer per sentence, each written as soon
// as that sentence is done (here while the others are still held in the engine), in the order
// they finish, with offsets in the whole text in the request's unit; then the text's final
// answer, whose sentences and edits the sentence answers equal. Without the field, the same
// stream answers a text once, as before.
TEST_F(GrammarServiceTest, StreamSentencesAnswersEachSentenceAsItIsDoneThenTheText) {
  config_.server.max_input_chars = 1000;
  StartServer();
  engine_->set_hold(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kWait);
  auto stream = stub_->CorrectStream(&context);
  const std::string text = "I like caf\u00e9 \U0001F600 a lot. It is ok.\r\n\r\nShe go home.";
  const std::vector<std::string> sentences = {"I like caf\u00e9 \U0001F600 a lot.", "It is ok.",
                                              "She go home."};
  const auto unit = gecd::v1::OFFSET_UNIT_UTF16_CODE_UNITS;
  CorrectRequest request;
  request.set_text(text);
  request.set_request_id("t");
  request.set_offset_unit(unit);
  request.set_stream_sentences(true);
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(engine_->WaitForHeld(3));

  std::map<uint32_t, gecd::v1::SentenceAnswer> answers;
  for (const size_t index : {2u, 0u, 1u}) {  // the engine finishes them in this order
    ASSERT_TRUE(engine_->ReleasePrompt(sentences[index]));
    CorrectResponse response;
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_TRUE(response.has_sentence_answer()) << "the text answered before all its sentences";
    const gecd::v1::SentenceAnswer& answer = response.sentence_answer();
    EXPECT_EQ(answer.index(), index);
    EXPECT_EQ(answer.sentence_count(), 3u);
    EXPECT_EQ(response.request_id(), "t");
    EXPECT_EQ(response.status().code(), 0);
    EXPECT_TRUE(response.corrected_text().empty());
    EXPECT_EQ(answer.corrected(), Expected(sentences[index]));
    EXPECT_EQ(SpanInUnit(text, answer.sentence().start(), answer.sentence().end(), unit),
              sentences[index]);
    EXPECT_TRUE(answer.sentence().changed());
    EXPECT_FALSE(answer.sentence().cached());
    for (const gecd::v1::Edit& e : answer.edits()) {
      EXPECT_EQ(e.sentence(), index);
      EXPECT_GE(e.start(), answer.sentence().start());
      EXPECT_LE(e.end(), answer.sentence().end());
    }
    answers[answer.index()] = answer;
  }
  CorrectResponse final_answer;
  ASSERT_TRUE(stream->Read(&final_answer));
  EXPECT_FALSE(final_answer.has_sentence_answer());
  EXPECT_EQ(final_answer.request_id(), "t");
  EXPECT_EQ(final_answer.corrected_text(), Expected(sentences[0]) + " " + Expected(sentences[1]) +
                                               "\r\n\r\n" + Expected(sentences[2]));
  EXPECT_EQ(ApplyInUnit(text, final_answer, unit), final_answer.corrected_text());
  ASSERT_EQ(final_answer.sentences_size(), 3);
  // What each sentence answer said is what the final answer says of that sentence.
  CorrectResponse from_parts;  // the sentence answers' edits, in text order
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(answers[i].sentence(),
                                                                   final_answer.sentences(i)))
        << i;
    for (const gecd::v1::Edit& e : answers[i].edits()) *from_parts.add_edits() = e;
  }
  ASSERT_EQ(from_parts.edits_size(), final_answer.edits_size());
  for (int i = 0; i < final_answer.edits_size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(from_parts.edits(i),
                                                                   final_answer.edits(i)))
        << i;
  }

  // The same stream, a request without the field: its text is answered once.
  request.set_stream_sentences(false);
  request.set_request_id("plain");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(engine_->WaitForHeld(3));
  engine_->ReleaseNewestFirst();
  CorrectResponse plain;
  ASSERT_TRUE(stream->Read(&plain));
  EXPECT_EQ(plain.request_id(), "plain");
  EXPECT_FALSE(plain.has_sentence_answer());
  EXPECT_EQ(plain.corrected_text(), final_answer.corrected_text());
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&plain));
  EXPECT_TRUE(stream->Finish().ok());
}

// Correct has one answer per call: it ignores stream_sentences.
TEST_F(GrammarServiceTest, CorrectIgnoresStreamSentences) {
  config_.server.max_input_chars = 1000;
  StartServer();
  CorrectRequest request;
  request.set_text("She go home. He are here.");
  request.set_stream_sentences(true);
  CorrectResponse response;
  ASSERT_TRUE(CorrectWith(*stub_, request, &response).ok());
  EXPECT_FALSE(response.has_sentence_answer());
  EXPECT_EQ(response.corrected_text(), "SHE GO HOME. HE ARE HERE.");
  EXPECT_EQ(response.sentences_size(), 2);
}

TEST_F(GrammarServiceTest, StreamSentencesAnswersCachedSentencesAtOnce) {
  config_.server.max_input_chars = 1000;
  config_.server.sentence_cache_mb = 1;
  StartServer();
  CorrectResponse warm;
  ASSERT_TRUE(Correct("She go home. He are here.", &warm).ok());
  engine_->set_hold(true);
  std::unique_ptr<SentenceStream> call = StreamSentences("She go home. They is fine. He are here.");
  auto& stream = call->stream;
  // The two cached sentences come while the new one is still in the engine.
  ASSERT_TRUE(engine_->WaitForHeld(1));
  std::vector<uint32_t> cached;
  for (int i = 0; i < 2; ++i) {
    CorrectResponse response;
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_TRUE(response.has_sentence_answer());
    EXPECT_TRUE(response.sentence_answer().sentence().cached());
    cached.push_back(response.sentence_answer().index());
  }
  EXPECT_THAT(cached, UnorderedElementsAre(0u, 2u));
  engine_->ReleaseNewestFirst();
  CorrectResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_sentence_answer());
  EXPECT_EQ(response.sentence_answer().index(), 1u);
  EXPECT_EQ(response.sentence_answer().corrected(), "THEY IS FINE.");
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_FALSE(response.has_sentence_answer());
  EXPECT_EQ(response.corrected_text(), "SHE GO HOME. THEY IS FINE. HE ARE HERE.");
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// One failed sentence fails the text, as on Correct: the sentences done before it were
// answered, the failed one and those it cancelled never are, and the final answer carries the
// status; the stream goes on.
TEST_F(GrammarServiceTest, StreamSentencesAFailedSentenceFailsTheTextAndEndsItsAnswers) {
  config_.server.max_input_chars = 1000;
  StartServer();
  engine_->set_hold(true);
  std::unique_ptr<SentenceStream> call = StreamSentences("One. Two. Three.", "t");
  auto& stream = call->stream;
  ASSERT_TRUE(engine_->WaitForHeld(3));
  ASSERT_TRUE(engine_->ReleasePrompt("One."));
  CorrectResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_sentence_answer());
  EXPECT_EQ(response.sentence_answer().index(), 0u);
  ASSERT_TRUE(engine_->ReleasePrompt("Two.", absl::UnavailableError("engine restarted")));
  EXPECT_TRUE(engine_->WaitForCancelled(1));  // "Three."
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_FALSE(response.has_sentence_answer());
  EXPECT_EQ(response.request_id(), "t");
  EXPECT_EQ(response.status().code(), static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  EXPECT_THAT(response.status().message(), HasSubstr("engine restarted"));
  // An invalid text (a control character between its sentences) gets no sentence answers.
  engine_->set_hold(false);
  CorrectRequest request = call->request;
  request.set_text(std::string("Fine here.\x01 Ok.", 15));
  request.set_request_id("bad");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_FALSE(response.has_sentence_answer());
  EXPECT_EQ(response.request_id(), "bad");
  EXPECT_EQ(response.status().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
}

// A text refused by admission fails whole; its cached sentences were done before (answered at
// once, without the engine), so they are answered, and the final response says it failed.
TEST_F(GrammarServiceTest, StreamSentencesARefusedTextStillHadItsCachedSentencesAnswered) {
  config_.server.max_input_chars = 1000;
  config_.server.sentence_cache_mb = 1;
  StartServer();
  CorrectResponse warm;
  ASSERT_TRUE(Correct("She go home.", &warm).ok());
  engine_->set_hold(true);
  std::vector<std::unique_ptr<PendingCall>> admitted;
  for (int i = 0; i < config_.server.max_in_flight; ++i) admitted.push_back(StartCorrect("ok"));
  ASSERT_TRUE(engine_->WaitForHeld(admitted.size()));
  std::unique_ptr<SentenceStream> call = StreamSentences("She go home. They is fine.", "t");
  auto& stream = call->stream;
  CorrectResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_sentence_answer());
  EXPECT_EQ(response.sentence_answer().index(), 0u);
  EXPECT_TRUE(response.sentence_answer().sentence().cached());
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_FALSE(response.has_sentence_answer());
  EXPECT_EQ(response.request_id(), "t");
  EXPECT_EQ(response.status().code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_GT(response.status().retry_after_ms(), 0u);
  engine_->ReleaseNewestFirst();
  for (auto& call : admitted) EXPECT_TRUE(call->Wait().ok());
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
}

// A client that cancels after its first sentence answers cancels the rest in the engine.
TEST_F(GrammarServiceTest, StreamSentencesCancellationCancelsTheRest) {
  config_.server.max_input_chars = 1000;
  StartServer();
  engine_->set_hold(true);
  std::unique_ptr<SentenceStream> call = StreamSentences("One. Two. Three.");
  auto& stream = call->stream;
  ASSERT_TRUE(engine_->WaitForHeld(3));
  ASSERT_TRUE(engine_->ReleasePrompt("Two."));
  CorrectResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.sentence_answer().index(), 1u);
  call->context.TryCancel();
  EXPECT_TRUE(engine_->WaitForCancelled(2));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
  EXPECT_TRUE(WaitUntil([&] { return server_->service().open_streams() == 0; }));
}

// The deadline is the call's: the sentences not done by then are cancelled in the engine.
TEST_F(GrammarServiceTest, StreamSentencesDeadlineCancelsTheRest) {
  config_.server.max_input_chars = 1000;
  StartServer();
  engine_->set_hold(true);
  std::unique_ptr<SentenceStream> call = StreamSentences("One. Two.", "", std::chrono::seconds(2));
  auto& stream = call->stream;
  ASSERT_TRUE(engine_->WaitForHeld(2));
  ASSERT_TRUE(engine_->ReleasePrompt("One."));
  CorrectResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.sentence_answer().index(), 0u);
  EXPECT_TRUE(engine_->WaitForCancelled(1));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
}

// A draining worker still writes the sentence answers of what it admitted, then the text's
// answer, then ends the stream with UNAVAILABLE.
TEST_F(GrammarServiceTest, StreamSentencesDrainAnswersAdmittedSentencesThenUnavailable) {
  config_.server.max_input_chars = 1000;
  config_.server.drain_quiet_ms = 0;
  StartServer();
  engine_->set_hold(true);
  std::unique_ptr<SentenceStream> call = StreamSentences("One. Two.");
  auto& stream = call->stream;
  ASSERT_TRUE(engine_->WaitForHeld(2));
  std::thread drain([&] { server_->Drain(kWait); });
  ASSERT_TRUE(WaitUntil([&] { return server_->service().draining(); }));
  CorrectResponse response;
  ASSERT_TRUE(engine_->ReleasePrompt("Two."));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.sentence_answer().index(), 1u);
  ASSERT_TRUE(engine_->ReleasePrompt("One."));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.sentence_answer().index(), 0u);
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_FALSE(response.has_sentence_answer());
  EXPECT_EQ(response.corrected_text(), "ONE. TWO.");
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  drain.join();
}

// The window counts texts: a text's sentence answers do not hold back the next text's read,
// and only the window's texts are read ahead.
TEST_F(GrammarServiceTest, StreamSentencesWindowCountsTexts) {
  config_.server.max_input_chars = 1000;
  StartServer({.stream_window = 1});
  engine_->set_hold(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kWait);
  auto stream = stub_->CorrectStream(&context);
  for (const std::string id : {"A", "B"}) {
    CorrectRequest request;
    request.set_text(id + " one. " + id + " two.");
    request.set_request_id(id);
    request.set_stream_sentences(true);
    ASSERT_TRUE(stream->Write(request));
  }
  ASSERT_TRUE(engine_->WaitForHeld(2));
  // Text B waits in flow control while A is outstanding, its sentence answers or not.
  ASSERT_TRUE(engine_->ReleasePrompt("A two."));
  CorrectResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), "A");
  EXPECT_TRUE(response.has_sentence_answer());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(engine_->Submitted().size(), 2u);
  ASSERT_TRUE(engine_->ReleasePrompt("A one."));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_TRUE(response.has_sentence_answer());
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), "A");
  EXPECT_FALSE(response.has_sentence_answer());
  // A is answered in full: B is read.
  ASSERT_TRUE(engine_->WaitForHeld(2));
  engine_->ReleaseNewestFirst();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.request_id(), "B");
    EXPECT_EQ(response.has_sentence_answer(), i < 2) << i;
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// Engine answers racing from several threads: every text of every stream gets each sentence's
// answer exactly once, all before its final answer, which comes exactly once.
TEST_F(GrammarServiceTest, StreamSentencesComeBeforeTheirTextUnderRacingCompletions) {
  engine_ = std::make_unique<FakeEngine>(*tokenizer_, /*delivery_threads=*/4);
  config_.server.max_in_flight = 1000;
  config_.server.max_input_chars = 1000;
  StartServer({.stream_window = 8});
  constexpr int kStreams = 3;
  constexpr int kTexts = 300;
  std::vector<std::thread> clients;
  std::vector<int> bad(kStreams, 0);
  std::vector<std::string> first_bad(kStreams);
  std::vector<char> finished_ok(kStreams, false);
  for (int s = 0; s < kStreams; ++s) {
    clients.emplace_back([&, s] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + kWait);
      auto stream = stub_->CorrectStream(&context);
      std::thread writer([&] {
        for (int i = 0; i < kTexts; ++i) {
          CorrectRequest request;
          request.set_text(absl::StrCat("s", s, " n", i, ". And ", i, " more. End ", i, "."));
          request.set_request_id(std::to_string(i));
          request.set_stream_sentences(true);
          if (!stream->Write(request)) break;
        }
        stream->WritesDone();
      });
      std::map<std::string, std::set<uint32_t>> parts;
      std::map<std::string, int> finals;
      const auto fail = [&](const std::string& why) {
        if (bad[s]++ == 0) first_bad[s] = why;
      };
      CorrectResponse response;
      while (stream->Read(&response)) {
        const std::string& id = response.request_id();
        if (response.has_sentence_answer()) {
          if (finals.count(id) != 0) fail("a sentence answer after its text's: " + id);
          if (!parts[id].insert(response.sentence_answer().index()).second) {
            fail("a sentence answered twice: " + id);
          }
        } else {
          if (++finals[id] != 1) fail("a text answered twice: " + id);
          if (response.status().code() != 0) fail("failed: " + id);
          if (parts[id].size() != 3) fail("a text before its sentences: " + id);
        }
      }
      if (finals.size() != static_cast<size_t>(kTexts)) fail("texts unanswered");
      writer.join();
      finished_ok[s] = stream->Finish().ok();
    });
  }
  for (std::thread& client : clients) client.join();
  for (int s = 0; s < kStreams; ++s) {
    EXPECT_TRUE(finished_ok[s]) << "stream " << s;
    EXPECT_EQ(bad[s], 0) << "stream " << s << ": " << first_bad[s];
  }
  EXPECT_TRUE(WaitUntil([&] { return server_->service().in_flight() == 0; }));
}

// The Python end-to-end client (tests/e2e/client_test.py, Debian's python3-grpcio) against
// this in-process worker; the daemon's integration tests run it against `gecd serve`.
TEST_F(GrammarServiceTest, PythonClientAgrees) {
  // Its stream sends every sentence at once: room for all of them (the test is about the
  // client, not admission).
  config_.server.max_in_flight = 64;
  StartServer();
  const std::string command = absl::StrCat("/usr/bin/python3 ", gecd::testing::SourceDir(),
                                           "/tests/e2e/client_test.py 127.0.0.1:", server_->port());
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << command;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "python3-grpcio or grpc_python_plugin missing";
  EXPECT_EQ(WEXITSTATUS(status), 0) << command;
}

}  // namespace
}  // namespace gecd::worker
