// Runs the real `gecd serve` and drives it with an async gRPC client, to show the daemon's
// promises under load: every request answered, worker and engine crashes contained, a clean
// drain on SIGTERM, cancellation reaching the engine, input validation, and load shedding.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/sanitized.h"
#include "testing/test_paths.h"

namespace gecd::supervisor {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::ChildrenByTitle;
using testing::DaemonProcess;
using testing::DefaultDaemonSets;
using testing::WaitFor;

constexpr milliseconds kCallTimeout(60'000);  // per request: a loaded 2-core box

// A sentence the byte-level tokenizer turns into 31 tokens.
const char kSentence[] = "She go to school every days now";

// A model slow enough that requests stay in the engine for a while (hundreds of steps at
// ~1 ms), so that kills and cancellations find work in flight.
const std::string& SlowModelDir() {
  static const std::string dir = [] {
    testing::RandomModelOptions options;
    options.vocab_size = 1024;
    options.hidden_size = 128;
    options.intermediate_size = 256;
    options.num_layers = 4;
    options.num_heads = 4;
    options.num_kv_heads = 2;
    options.max_position_embeddings = 512;
    return testing::WriteModelDir(options);
  }();
  return dir;
}

// What became of one request.
struct Outcome {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::string message;
  Clock::time_point start;
  Clock::time_point end;
  int channel = 0;
  uint32_t prompt_tokens = 0;
  double seconds() const { return std::chrono::duration<double>(end - start).count(); }
};

// Async (callback API) client with `channels` separate connections: each channel gets its own
// subchannel pool so that gRPC does not share one TCP connection among them.
class Client {
 public:
  Client(const std::string& target, int channels) : target_(target) {
    for (int i = 0; i < channels; ++i) AddChannel();
  }
  // gRPC threads may still be inside a call's completion (freeing it) when its `done` has run:
  // wait for them, so that nothing of a call outlives the client (or the process).
  ~Client() {
    WaitFor([&] { return live_calls_.load() == 0; }, kCallTimeout);
  }

  int AddChannel() {
    grpc::ChannelArguments args;
    args.SetInt("gecd.test.channel", static_cast<int>(stubs_.size()));
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels_.push_back(
        grpc::CreateCustomChannel(target_, grpc::InsecureChannelCredentials(), args));
    stubs_.push_back(gecd::v1::GrammarCorrection::NewStub(channels_.back()));
    return static_cast<int>(stubs_.size()) - 1;
  }
  int channels() const { return static_cast<int>(stubs_.size()); }
  bool Connect(int channel) {
    return channels_[channel]->WaitForConnected(std::chrono::system_clock::now() + kCallTimeout);
  }

  // One Correct call; `done` runs on a gRPC thread. `context` (optional) receives the call's
  // context, valid until `done` has run, to cancel it.
  void Start(int channel, const gecd::v1::CorrectRequest& request, milliseconds deadline,
             std::function<void(const Outcome&)> done, grpc::ClientContext** context = nullptr) {
    live_calls_.fetch_add(1);
    auto* call = new PendingCall;
    call->request = request;
    call->outcome.channel = channel;
    call->context.set_deadline(std::chrono::system_clock::now() + deadline);
    if (context != nullptr) *context = &call->context;
    call->outcome.start = Clock::now();
    stubs_[channel]->async()->Correct(&call->context, &call->request, &call->response,
                                      [this, call, done = std::move(done)](grpc::Status status) {
                                        call->outcome.end = Clock::now();
                                        call->outcome.code = status.error_code();
                                        call->outcome.message = status.error_message();
                                        call->outcome.prompt_tokens =
                                            call->response.prompt_tokens();
                                        done(call->outcome);
                                        delete call;
                                        live_calls_.fetch_sub(1);
                                      });
  }

  // A blocking call.
  Outcome Call(int channel, const std::string& text, milliseconds deadline = kCallTimeout) {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Outcome> result;
    gecd::v1::CorrectRequest request;
    request.set_text(text);
    Start(channel, request, deadline, [&](const Outcome& o) {
      std::lock_guard<std::mutex> lock(mu);
      result = o;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return result.has_value(); });  // the deadline bounds it
    return *result;
  }

 private:
  struct PendingCall {
    grpc::ClientContext context;
    gecd::v1::CorrectRequest request;
    gecd::v1::CorrectResponse response;
    Outcome outcome;
  };
  std::string target_;
  std::atomic<int> live_calls_{0};
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<gecd::v1::GrammarCorrection::Stub>> stubs_;
};

gecd::v1::CorrectRequest Request(const std::string& text, uint32_t max_output_tokens = 0) {
  gecd::v1::CorrectRequest request;
  request.set_text(text);
  if (max_output_tokens > 0) request.set_max_output_tokens(max_output_tokens);
  return request;
}

// Closed-loop load: `slots` requests in flight, each replaced when it ends, slot i on channel
// i % channels, until Stop(). Each request sent is the next of `requests`, cycled.
class ClosedLoop {
 public:
  ClosedLoop(Client& client, int slots, gecd::v1::CorrectRequest request,
             milliseconds deadline = kCallTimeout)
      : ClosedLoop(client, slots, std::vector<gecd::v1::CorrectRequest>{std::move(request)},
                   deadline) {}
  ClosedLoop(Client& client, int slots, std::vector<gecd::v1::CorrectRequest> requests,
             milliseconds deadline = kCallTimeout)
      : client_(client), requests_(std::move(requests)), deadline_(deadline) {
    for (int i = 0; i < slots; ++i) Launch(i % client_.channels());
  }
  ~ClosedLoop() { Stop(); }

  // Starts no more requests and waits (bounded by the deadline) for the outstanding ones.
  bool Stop(milliseconds timeout = kCallTimeout + milliseconds(10'000)) {
    running_ = false;
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return outstanding_ == 0; });
  }

  std::vector<Outcome> outcomes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return outcomes_;
  }
  int ok_count() const { return ok_.load(); }
  // Polls until `n` more requests succeeded than when called.
  bool WaitForMoreOk(int n, milliseconds timeout = kCallTimeout) const {
    const int target = ok_.load() + n;
    return WaitFor([&] { return ok_.load() >= target; }, timeout);
  }

 private:
  void Launch(int channel) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++outstanding_;
    }
    const size_t next = next_.fetch_add(1) % requests_.size();
    client_.Start(channel, requests_[next], deadline_, [this, channel](const Outcome& o) {
      if (o.code == grpc::StatusCode::OK) ok_.fetch_add(1);
      const bool again = running_.load();
      if (again) Launch(channel);
      std::lock_guard<std::mutex> lock(mu_);
      outcomes_.push_back(o);
      if (--outstanding_ == 0) cv_.notify_all();
    });
  }

  Client& client_;
  const std::vector<gecd::v1::CorrectRequest> requests_;
  std::atomic<size_t> next_{0};
  const milliseconds deadline_;
  std::atomic<bool> running_{true};
  std::atomic<int> ok_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int outstanding_ = 0;
  std::vector<Outcome> outcomes_;
};

// Starts `n` requests at once, spread over the client's channels; their outcomes.
std::vector<Outcome> Burst(Client& client, int n, const gecd::v1::CorrectRequest& request,
                           milliseconds deadline = kCallTimeout) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Outcome> outcomes;
  for (int i = 0; i < n; ++i) {
    client.Start(i % client.channels(), request, deadline, [&](const Outcome& o) {
      std::lock_guard<std::mutex> lock(mu);
      outcomes.push_back(o);
      if (static_cast<int>(outcomes.size()) == n) cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return static_cast<int>(outcomes.size()) == n; });  // deadlines bound it
  return outcomes;
}

std::map<grpc::StatusCode, int> CountByCode(const std::vector<Outcome>& outcomes) {
  std::map<grpc::StatusCode, int> counts;
  for (const Outcome& o : outcomes) ++counts[o.code];
  return counts;
}

std::string Describe(const std::map<grpc::StatusCode, int>& counts) {
  std::string s;
  for (const auto& [code, n] : counts)
    absl::StrAppend(&s, " code ", static_cast<int>(code), ": ", n);
  return s;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// --- Which worker serves which connection, from /proc -------------------------------------

// (local port, remote port, state, inode) of every TCP socket of this network namespace.
struct TcpSocket {
  int local_port = 0;
  int remote_port = 0;
  int state = 0;
  std::string inode;
};
std::vector<TcpSocket> TcpSockets() {
  std::vector<TcpSocket> sockets;
  // gRPC listens on IPv6 sockets (127.0.0.1 shows as ::ffff:127.0.0.1 in tcp6): read both.
  const std::string table =
      testing::ReadWholeFile("/proc/net/tcp") + testing::ReadWholeFile("/proc/net/tcp6");
  for (absl::string_view line : absl::StrSplit(table, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "sl")) continue;  // header
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 10) continue;
    // Fields are "ADDR:PORT" in hex; a line that does not parse is not a socket of ours.
    auto port = [](absl::string_view addr, int* p) {
      return absl::SimpleHexAtoi(addr.substr(addr.find(':') + 1), p);
    };
    TcpSocket socket{.inode = std::string(f[9])};
    if (!port(f[1], &socket.local_port) || !port(f[2], &socket.remote_port) ||
        !absl::SimpleHexAtoi(f[3], &socket.state)) {
      continue;
    }
    sockets.push_back(std::move(socket));
  }
  return sockets;
}
constexpr int kEstablished = 1;

// Client-side ports of established connections to `server_port`.
std::set<int> ClientPorts(int server_port) {
  std::set<int> ports;
  for (const TcpSocket& s : TcpSockets()) {
    if (s.state == kEstablished && s.remote_port == server_port) ports.insert(s.local_port);
  }
  return ports;
}

// Whether process `pid` holds the server side of the connection from `client_port`.
bool Serves(pid_t pid, int server_port, int client_port) {
  std::string inode;
  for (const TcpSocket& s : TcpSockets()) {
    if (s.local_port == server_port && s.remote_port == client_port) inode = s.inode;
  }
  if (inode.empty()) return false;
  const std::string wanted = absl::StrCat("socket:[", inode, "]");
  std::error_code ec;
  for (const auto& fd :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec)) {
    std::error_code link_ec;
    if (std::filesystem::read_symlink(fd.path(), link_ec).string() == wanted) return true;
  }
  return false;
}

// --- Tests ---------------------------------------------------------------------------------

TEST(DaemonTest, AThousandConcurrentRequestsAreAllAnswered) {
  DaemonProcess daemon({"engine.backend=cpu", "model.max_output_tokens=8"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  Client client(daemon.grpc_target(), 8);
  const std::vector<Outcome> outcomes = Burst(client, 1000, Request(kSentence));
  const auto counts = CountByCode(outcomes);
  EXPECT_EQ(counts.count(grpc::StatusCode::OK) ? counts.at(grpc::StatusCode::OK) : 0, 1000)
      << Describe(counts) << "\n"
      << outcomes.front().message << daemon.log();
  for (const Outcome& o : outcomes) {
    if (o.code == grpc::StatusCode::OK) {
      ASSERT_EQ(o.prompt_tokens, sizeof(kSentence) - 1);
    }
  }
}

// Issue 12: gecd_time_to_first_token_seconds stayed empty (DONE carried no first-token time),
// and a request the engine refused came back as "the engine rejected the request".
TEST(DaemonTest, TimeToFirstTokenIsObservedAndEngineRejectionsKeepTheirReason) {
  // Two blocks of 16 tokens: short sentences fit, kSentence (31 tokens) and 8 more do not, and
  // only the engine knows (the workers check model.max_input_tokens).
  DaemonProcess daemon(
      {"engine.backend=cpu", "engine.kv_cache_blocks=2", "model.max_output_tokens=8"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  Client client(daemon.grpc_target(), 1);
  constexpr int kRequests = 5;
  for (int i = 0; i < kRequests; ++i) {
    const Outcome ok = client.Call(0, "I go");
    ASSERT_EQ(ok.code, grpc::StatusCode::OK) << ok.message << daemon.log();
  }
  const Outcome refused = client.Call(0, kSentence);
  EXPECT_EQ(refused.code, grpc::StatusCode::INVALID_ARGUMENT) << refused.message;
  EXPECT_TRUE(absl::StrContains(refused.message, "positions the KV cache and model hold"))
      << refused.message;
  std::optional<double> count;
  EXPECT_TRUE(WaitFor(
      [&] {
        count = daemon.Metric("gecd_time_to_first_token_seconds_count");
        return count == kRequests;
      },
      milliseconds(10'000)))
      << (count ? *count : -1.0);
  EXPECT_GT(daemon.Metric("gecd_time_to_first_token_seconds_sum").value_or(0), 0.0);
}

TEST(DaemonTest, KilledWorkerIsRestartedWhileTheOtherKeepsServing) {
  DaemonProcess daemon({"engine.backend=cpu", "model.max_output_tokens=16"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  std::map<std::string, pid_t> before = daemon.WaitForChildren(2);
  const pid_t worker0 = before.at("gecd: worker 0");
  const pid_t worker1 = before.at("gecd: worker 1");

  // Open connections one at a time until both workers hold at least two (SO_REUSEPORT spreads
  // them by hash); note which worker serves each.
  Client client(daemon.grpc_target(), 0);
  std::vector<pid_t> served_by;
  int on0 = 0, on1 = 0;
  while ((on0 < 2 || on1 < 2) && client.channels() < 48) {
    const std::set<int> old_ports = ClientPorts(daemon.grpc_port());
    const int channel = client.AddChannel();
    ASSERT_TRUE(client.Connect(channel)) << daemon.log();
    pid_t server = 0;
    ASSERT_TRUE(WaitFor(
        [&] {
          for (int port : ClientPorts(daemon.grpc_port())) {
            if (old_ports.count(port)) continue;
            if (Serves(worker0, daemon.grpc_port(), port)) server = worker0;
            if (Serves(worker1, daemon.grpc_port(), port)) server = worker1;
          }
          return server != 0;
        },
        milliseconds(10'000)))
        << "cannot tell which worker serves channel " << channel;
    served_by.push_back(server);
    (server == worker0 ? on0 : on1)++;
  }
  ASSERT_GE(on0, 1);
  ASSERT_GE(on1, 1);

  ClosedLoop load(client, 4 * client.channels(), Request(kSentence));
  ASSERT_TRUE(load.WaitForMoreOk(100)) << daemon.log();
  const Clock::time_point killed_at = Clock::now();
  ASSERT_EQ(kill(worker0, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] {
    const auto now = ChildrenByTitle(daemon.pid());
    return now.count("gecd: worker 0") && now.at("gecd: worker 0") != worker0;
  })) << daemon.log();
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  ASSERT_TRUE(load.WaitForMoreOk(100)) << daemon.log();
  ASSERT_TRUE(load.Stop()) << daemon.log();

  int survivor_ok_after_kill = 0, unavailable = 0;
  for (const Outcome& o : load.outcomes()) {
    if (served_by[o.channel] == worker1) {
      EXPECT_EQ(o.code, grpc::StatusCode::OK) << "on the surviving worker: " << o.message;
      if (o.start > killed_at) ++survivor_ok_after_kill;
    } else {
      EXPECT_TRUE(o.code == grpc::StatusCode::OK || o.code == grpc::StatusCode::UNAVAILABLE)
          << static_cast<int>(o.code) << " " << o.message;
      if (o.code == grpc::StatusCode::UNAVAILABLE) ++unavailable;
    }
  }
  std::printf(
      "worker kill: %d/%d channels on the killed worker, %d UNAVAILABLE there; %d OK on "
      "the survivor after the kill\n",
      on0, client.channels(), unavailable, survivor_ok_after_kill);
  EXPECT_GT(survivor_ok_after_kill, 0);
  EXPECT_EQ(ChildrenByTitle(daemon.pid()).at("gecd: worker 1"), worker1);

  // New connections after the restart are served, whichever worker takes them.
  Client fresh(daemon.grpc_target(), 4);
  const auto counts = CountByCode(Burst(fresh, 40, Request(kSentence)));
  EXPECT_EQ(counts.count(grpc::StatusCode::OK) ? counts.at(grpc::StatusCode::OK) : 0, 40)
      << Describe(counts);
  EXPECT_EQ(daemon.Metric("gecd_process_restarts_total{process=\"worker\"}"), 1.0);
}

// Issue 24: a kill -9 of the engine under load failed the calls in flight with UNAVAILABLE (11
// of 255 at 20 req/s). A correction is idempotent, so the workers re-send what the dead engine
// held to the restarted one, and hold what arrives meanwhile: a crash costs latency, no answer.
TEST(DaemonTest, KilledEngineLosesNoCallsAndServiceResumes) {
  DaemonProcess daemon({"engine.backend=cpu", absl::StrCat("model.dir=", SlowModelDir()),
                        "model.max_output_tokens=300"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  const pid_t engine = daemon.WaitForChildren(2).at("gecd: engine");
  Client client(daemon.grpc_target(), 4);
  auto load = std::make_unique<ClosedLoop>(client, 16, Request(kSentence));
  ASSERT_TRUE(load->WaitForMoreOk(8)) << daemon.log();

  const Clock::time_point killed_at = Clock::now();
  ASSERT_EQ(kill(engine, SIGKILL), 0);
  ASSERT_TRUE(load->Stop()) << "requests still hanging after the engine died\n" << daemon.log();

  int in_flight = 0, sent_meanwhile = 0;
  std::vector<double> latencies;
  for (const Outcome& o : load->outcomes()) {
    if (o.end < killed_at) continue;  // answered before the kill
    EXPECT_EQ(o.code, grpc::StatusCode::OK) << static_cast<int>(o.code) << " " << o.message;
    (o.start < killed_at ? in_flight : sent_meanwhile) += 1;
    latencies.push_back(o.seconds());
  }
  EXPECT_GT(in_flight, 0);
  std::printf(
      "engine kill: %d calls in flight and %d sent after it, all answered; their p99 "
      "%.3f s\n",
      in_flight, sent_meanwhile, Percentile(latencies, 0.99));

  ASSERT_TRUE(WaitFor([&] {
    const auto now = ChildrenByTitle(daemon.pid());
    return now.count("gecd: engine") && now.at("gecd: engine") != engine;
  })) << daemon.log();
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  const Outcome after = client.Call(0, kSentence);
  EXPECT_EQ(after.code, grpc::StatusCode::OK) << after.message << daemon.log();
}

// Whether a non-OK outcome is a refusal at admission (the request never got in), not the loss
// of an admitted request.
bool RefusedAtAdmission(const Outcome& o) {
  if (o.code == grpc::StatusCode::RESOURCE_EXHAUSTED) return true;
  if (o.code != grpc::StatusCode::UNAVAILABLE) return false;
  // The worker's draining answer, or no listener left to connect to.
  return absl::StrContains(o.message, "shutting down") ||
         absl::StrContains(o.message, "failed to connect") ||
         absl::StrContains(o.message, "Connection refused");
}

TEST(DaemonTest, SigtermUnderLoadLosesNoAdmittedRequestAndExitsZero) {
  DaemonProcess daemon({"engine.backend=cpu", absl::StrCat("model.dir=", SlowModelDir()),
                        "model.max_output_tokens=64", "server.grace_period_ms=30000",
                        // Longer than the default 500 ms: a call sent just before the load
                        // stops can spend that long reaching a worker under AddressSanitizer
                        // on a busy box, and one arriving after the quiet period is cancelled.
                        "server.drain_quiet_ms=2000"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  Client client(daemon.grpc_target(), 4);
  ClosedLoop load(client, 16, Request(kSentence));
  ASSERT_TRUE(load.WaitForMoreOk(16)) << daemon.log();

  const Clock::time_point term_at = Clock::now();
  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  std::this_thread::sleep_for(milliseconds(300));  // load keeps coming for a while
  ASSERT_TRUE(load.Stop()) << daemon.log();
  const std::optional<int> status = daemon.WaitExit(milliseconds(60'000));
  ASSERT_TRUE(status.has_value()) << daemon.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << daemon.log();

  int finished_after_term = 0;
  for (const Outcome& o : load.outcomes()) {
    if (o.code == grpc::StatusCode::OK) {
      if (o.start < term_at && o.end > term_at) ++finished_after_term;
      continue;
    }
    // Never CANCELLED: workers answer UNAVAILABLE until calls stop (server.drain_quiet_ms)
    // before their gRPC server shuts down, which would cancel a call reaching it.
    EXPECT_TRUE(RefusedAtAdmission(o))
        << "lost: code " << static_cast<int>(o.code) << " " << o.message;
  }
  // Requests in flight at the SIGTERM were finished, not dropped.
  EXPECT_GT(finished_after_term, 0);
  std::printf("sigterm: %d requests in flight at the signal finished OK; %zu outcomes\n",
              finished_after_term, load.outcomes().size());
}

TEST(DaemonTest, CancelledAndExpiredRequestsStopConsumingEngineSteps) {
  DaemonProcess daemon({"engine.backend=cpu", absl::StrCat("model.dir=", SlowModelDir()),
                        "model.max_output_tokens=450"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  const std::optional<double> before = daemon.Metric("gecd_cancelled_sequences_total");
  ASSERT_TRUE(before.has_value()) << "no gecd_cancelled_sequences_total in /metrics";
  Client client(daemon.grpc_target(), 2);

  constexpr int kEach = 8;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Outcome> outcomes;
  auto record = [&](const Outcome& o) {
    std::lock_guard<std::mutex> lock(mu);
    outcomes.push_back(o);
    cv.notify_all();
  };
  // Expired: a 150 ms deadline on ~450 steps of work.
  for (int i = 0; i < kEach; ++i) {
    client.Start(i % 2, Request(kSentence), milliseconds(150), record);
  }
  // Cancelled by the client after 150 ms. The contexts live until their callbacks ran, and
  // those wait for us below, so TryCancel only ever touches live contexts.
  std::vector<grpc::ClientContext*> contexts(kEach);
  std::atomic<bool> may_finish{false};
  for (int i = 0; i < kEach; ++i) {
    client.Start(
        i % 2, Request(kSentence), kCallTimeout,
        [&](const Outcome& o) {
          WaitFor([&] { return may_finish.load(); }, kCallTimeout);
          record(o);
        },
        &contexts[i]);
  }
  std::this_thread::sleep_for(milliseconds(150));
  for (grpc::ClientContext* context : contexts) context->TryCancel();
  may_finish = true;
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return static_cast<int>(outcomes.size()) == 2 * kEach; });
  }
  const auto counts = CountByCode(outcomes);
  EXPECT_EQ(
      counts.count(grpc::StatusCode::DEADLINE_EXCEEDED) + counts.count(grpc::StatusCode::CANCELLED),
      counts.size())
      << Describe(counts);

  // The engine drops those sequences: the counter moves (each one the engine still held).
  std::optional<double> after;
  EXPECT_TRUE(WaitFor(
      [&] {
        after = daemon.Metric("gecd_cancelled_sequences_total");
        return after.has_value() && *after >= *before + 1;
      },
      milliseconds(20'000)))
      << "gecd_cancelled_sequences_total " << *before << " -> " << after.value_or(-1);
  std::printf("cancel: %s; gecd_cancelled_sequences_total %.0f -> %.0f\n", Describe(counts).c_str(),
              *before, after.value_or(-1));
  // ... and is idle again well before 16 x 450 tokens could have been generated.
  EXPECT_TRUE(WaitFor([&] { return daemon.Metric("gecd_request_concurrency") == 0.0; },
                      milliseconds(20'000)));
}

TEST(DaemonTest, InvalidInputsAreInvalidArgument) {
  DaemonProcess daemon({"server.max_input_chars=100", "model.max_input_tokens=60"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  Client client(daemon.grpc_target(), 1);

  const Outcome empty = client.Call(0, "");
  EXPECT_EQ(empty.code, grpc::StatusCode::INVALID_ARGUMENT) << empty.message;

  const Outcome too_long = client.Call(0, std::string(101, 'a'));
  EXPECT_EQ(too_long.code, grpc::StatusCode::INVALID_ARGUMENT) << too_long.message;
  EXPECT_TRUE(absl::StrContains(too_long.message, "server.max_input_chars")) << too_long.message;
  // 100 characters of two bytes each are within the character limit.
  EXPECT_EQ(client
                .Call(0,
                      [] {
                        std::string s;
                        for (int i = 0; i < 25; ++i) s += "\xc3\xa9";
                        return s;
                      }())
                .code,
            grpc::StatusCode::OK);

  // A sentence over the token limit is answered unchanged (flagged `skipped`), not refused: one
  // long sentence must not fail a whole text.
  EXPECT_EQ(client.Call(0, std::string(61, 'a')).code, grpc::StatusCode::OK);

  EXPECT_EQ(client.Call(0, kSentence).code, grpc::StatusCode::OK);
}

TEST(DaemonTest, InvalidUtf8IsInvalidArgument) {
  DaemonProcess daemon;
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  Client client(daemon.grpc_target(), 1);
  // The public `text` is a string, but the server reads it as bytes (gecd.internal), so invalid
  // UTF-8 that a client sends (C++ protobuf only logs it) reaches the validator, which refuses it.
  const Outcome bad_utf8 = client.Call(0, "caf\xc3 \xff\xfe ok");
  EXPECT_EQ(bad_utf8.code, grpc::StatusCode::INVALID_ARGUMENT)
      << static_cast<int>(bad_utf8.code) << " '" << bad_utf8.message << "'";
  EXPECT_EQ(client.Call(0, kSentence).code, grpc::StatusCode::OK);
}

// Under overload every call must be answered or refused at admission, nothing else; the
// latencies of the answered ones.
std::vector<double> AdmittedLatencies(const std::vector<Outcome>& outcomes) {
  std::vector<double> admitted;
  for (const Outcome& o : outcomes) {
    EXPECT_TRUE(o.code == grpc::StatusCode::OK || o.code == grpc::StatusCode::RESOURCE_EXHAUSTED)
        << static_cast<int>(o.code) << " " << o.message;
    if (o.code == grpc::StatusCode::OK) admitted.push_back(o.seconds());
  }
  return admitted;
}

TEST(DaemonTest, OverloadIsShedWithResourceExhaustedWhileAdmittedRequestsKeepABoundedP99) {
  DaemonProcess daemon({"engine.backend=cpu", absl::StrCat("model.dir=", SlowModelDir()),
                        "model.max_output_tokens=32", "server.workers=1", "server.max_in_flight=8",
                        "server.slo_p99_ms=1000"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  Client client(daemon.grpc_target(), 4);
  // 64 clients, each retrying at once: far above what 8 admitted requests at a time can serve.
  ClosedLoop load(client, 64, Request(kSentence));
  ASSERT_TRUE(load.WaitForMoreOk(50)) << daemon.log();
  ASSERT_TRUE(load.Stop()) << daemon.log();

  const std::vector<Outcome> outcomes = load.outcomes();
  const auto counts = CountByCode(outcomes);
  const std::vector<double> admitted = AdmittedLatencies(outcomes);
  EXPECT_GT(counts.count(grpc::StatusCode::RESOURCE_EXHAUSTED)
                ? counts.at(grpc::StatusCode::RESOURCE_EXHAUSTED)
                : 0,
            0)
      << Describe(counts);
  ASSERT_GE(admitted.size(), 50u) << Describe(counts);
  const double p99 = Percentile(admitted, 0.99);
  EXPECT_LT(p99, 5.0) << Describe(counts);
  // The pod's margin, steered by every answer since the start (1 only before the first).
  const std::optional<double> margin = daemon.Metric("gecd_admission_margin");
  ASSERT_TRUE(margin.has_value());
  EXPECT_NE(*margin, 1.0);
  EXPECT_GE(*margin, 0.7);
  EXPECT_LE(*margin, 2.5);
  // Its late mark (the floor at 0.7 until an answer was late) and the load it applies from.
  const std::optional<double> mark = daemon.Metric("gecd_admission_late_mark");
  const std::optional<double> mark_in_flight = daemon.Metric("gecd_admission_late_mark_in_flight");
  ASSERT_TRUE(mark.has_value() && mark_in_flight.has_value());
  EXPECT_GE(*mark, 0.7);
  EXPECT_LE(*mark, 2.5);
  EXPECT_EQ(*mark > 0.7, *mark_in_flight > 0);
  // And the line it predicts from, as the engine published it in the segment.
  const std::optional<double> fixed = daemon.Metric("gecd_admission_step_fixed_seconds");
  const std::optional<double> per_sequence =
      daemon.Metric("gecd_admission_step_per_sequence_seconds");
  ASSERT_TRUE(fixed.has_value() && per_sequence.has_value());
  EXPECT_GT(*fixed + *per_sequence, 0);
  std::printf(
      "overload: %s; admitted p50 %.3f s, p99 %.3f s, margin %.3f, late mark %.3f from %.0f in "
      "flight, step %.2f ms + %.3f ms per sequence\n",
      Describe(counts).c_str(), Percentile(admitted, 0.5), p99, *margin, *mark, *mark_in_flight,
      *fixed * 1e3, *per_sequence * 1e3);
}

// Throughput ratios measured under a sanitizer say nothing about the real build.
using gecd::testing::kSanitized;

// Issue 24: on the default daemon and model, a closed loop of 64 clients that re-send a refusal
// at once was 99.9% refused (a fixed 500 ms queue limit under the 1 s objective refused above
// ~22 in flight; the refusals' CPU then slowed the engine, which lowered the rate estimate, which
// refused more). 64 in flight is within what the pod serves inside 1 s, so the loop of 64 must
// be answered at about the rate a loop of 8 is, with the admitted p99 inside the objective.
TEST(DaemonTest, AClosedLoopOf64IsServedAtCapacityNotRefused) {
  if (kSanitized) GTEST_SKIP() << "a throughput ratio says nothing under a sanitizer";
  DaemonProcess daemon(DefaultDaemonSets());
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  Client client(daemon.grpc_target(), 4);
  // The real mix of short and long sentences when ../shared has JFLEG, else one sentence.
  std::vector<gecd::v1::CorrectRequest> requests;
  if (const auto jfleg = testing::SharedDataPath("jfleg/dev.src")) {
    for (absl::string_view line : absl::StrSplit(testing::ReadWholeFile(*jfleg), '\n')) {
      if (!absl::StripAsciiWhitespace(line).empty()) requests.push_back(Request(std::string(line)));
    }
  }
  if (requests.empty()) requests.push_back(Request(kSentence));
  // Capacity without refusals: a loop of 8, after its first answers warmed it up.
  auto answered_per_second = [&](int clients, milliseconds window, std::vector<Outcome>* kept) {
    ClosedLoop load(client, clients, requests);
    EXPECT_TRUE(load.WaitForMoreOk(clients)) << daemon.log();
    const int before = load.ok_count();
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(window);
    const double rate =
        (load.ok_count() - before) /
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(load.Stop()) << daemon.log();
    if (kept != nullptr) *kept = load.outcomes();
    return rate;
  };
  const double rate_8 = answered_per_second(8, milliseconds(3000), nullptr);
  std::vector<Outcome> outcomes;
  const double rate_64 = answered_per_second(64, milliseconds(5000), &outcomes);
  const auto counts = CountByCode(outcomes);
  const std::vector<double> admitted = AdmittedLatencies(outcomes);
  ASSERT_FALSE(admitted.empty()) << Describe(counts);
  const double p99 = Percentile(admitted, 0.99);
  std::printf(
      "closed loop (%zu sentences): 8 clients %.1f/s; 64 clients %.1f/s (%s), admitted "
      "p99 %.3f s\n",
      requests.size(), rate_8, rate_64, Describe(counts).c_str(), p99);
  EXPECT_GE(rate_64, 0.8 * rate_8) << Describe(counts);
  // Not asserted: the admitted p99. This client re-sends each refusal at once from the same two
  // cores, 9,000 to 26,000 a second, and the CPU they take from the engine is not in the
  // prediction: 1.8 to 5.6 s here on JFLEG's mix (bench/RESULTS.md, issue 24's open point).
}

// A burst far above capacity in the batch class, with deadlines long enough to drain it, is
// answered in full: batch sentences wait for room instead of being refused.
TEST(DaemonTest, ABatchBurstWithLongDeadlinesIsAnsweredInFull) {
  // The small byte-level model, not the default one: the sanitizer builds cannot load the
  // default model's SentencePiece tokenizer (its shim's private protobuf needs RTLD_DEEPBIND).
  DaemonProcess daemon(
      {"engine.backend=cpu", "model.max_output_tokens=8", "server.slo_p99_ms=1000"});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  Client client(daemon.grpc_target(), 4);
  gecd::v1::CorrectRequest request = Request(kSentence);
  request.set_priority("batch");
  const auto start = std::chrono::steady_clock::now();
  const auto counts = CountByCode(Burst(client, 300, request, milliseconds(60'000)));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("batch burst: 300 calls in %.1f s: %s\n", seconds, Describe(counts).c_str());
  EXPECT_EQ(counts.count(grpc::StatusCode::OK) ? counts.at(grpc::StatusCode::OK) : 0, 300)
      << Describe(counts);
}

// VmRSS of `pid` in KiB; 0 if unreadable.
int64_t RssKib(pid_t pid) {
  for (absl::string_view line :
       absl::StrSplit(testing::ReadWholeFile(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (!absl::ConsumePrefix(&line, "VmRSS:")) continue;
    int64_t kib = 0;
    return absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line), " kB"), &kib) ? kib
                                                                                              : 0;
  }
  return 0;
}

// Issue 12: 10,000 CorrectStream calls opened and abandoned (never half-closed or cancelled)
// on one connection grew the worker by ~180 MB (~18 KB per open call). The worker now holds at
// most server.max_streams_per_connection of them; the rest wait in the client.
TEST(DaemonTest, AbandonedStreamsAreBoundedPerConnection) {
  constexpr int kLimit = 100;
  constexpr int kStreams = 2000;
  DaemonProcess daemon(
      {"server.workers=1", absl::StrCat("server.max_streams_per_connection=", kLimit)});
  ASSERT_TRUE(daemon.WaitReady()) << daemon.log();
  const std::map<std::string, pid_t> children = ChildrenByTitle(daemon.pid());
  ASSERT_TRUE(children.count("gecd: worker 0")) << daemon.log();
  const pid_t worker = children.at("gecd: worker 0");
  const int64_t rss_before = RssKib(worker);
  ASSERT_GT(rss_before, 0);

  auto channel = grpc::CreateChannel(daemon.grpc_target(), grpc::InsecureChannelCredentials());
  auto stub = gecd::v1::GrammarCorrection::NewStub(channel);
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<
      grpc::ClientAsyncReaderWriter<gecd::v1::CorrectRequest, gecd::v1::CorrectResponse>>>
      streams;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(stub->PrepareAsyncCorrectStream(contexts.back().get(), &cq));
    streams.back()->StartCall(reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
  }
  const auto open = [&] { return daemon.Metric("gecd_open_streams").value_or(-1); };
  EXPECT_TRUE(WaitFor([&] { return open() == kLimit; }, milliseconds(30'000))) << open();
  std::this_thread::sleep_for(milliseconds(500));  // no more come
  EXPECT_EQ(open(), kLimit);
  const int64_t growth_kib = RssKib(worker) - rss_before;
  // Unbounded, the 2,000 streams cost ~35 MB; 100 of them ~2 MB.
  EXPECT_LT(growth_kib, 12 * 1024) << "worker RSS grew by " << growth_kib << " KiB";
  std::printf("abandoned streams: %d open in the worker of %d, RSS +%lld KiB\n",
              static_cast<int>(open()), kStreams, static_cast<long long>(growth_kib));

  for (auto& context : contexts) context->TryCancel();
  void* tag;
  bool ok;
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_EQ(cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + kCallTimeout),
              grpc::CompletionQueue::GOT_EVENT);
  }
  EXPECT_TRUE(WaitFor([&] { return open() == 0; }, milliseconds(30'000))) << open();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace gecd::supervisor
