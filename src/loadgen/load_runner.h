#ifndef GECD_LOADGEN_LOAD_RUNNER_H_
#define GECD_LOADGEN_LOAD_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loadgen/load_recorder.h"
#include "loadgen/rate_profile.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace gecd::loadgen {

// One load run against a gecd.v1.GrammarCorrection server.
struct RunConfig {
  // Channel i connects to targets[i % targets.size()], and requests go round-robin over the
  // channels, so each target gets its share of the channels and of the load.
  std::vector<std::string> targets = {"127.0.0.1:50051"};
  // Each channel gets distinct channel args, hence its own TCP connection, so that the kernel
  // spreads them over the server's SO_REUSEPORT workers. At least one per target.
  int channels = 8;
  int threads = 2;      // completion-queue threads
  bool stream = false;  // CorrectStream, one stream per channel, instead of unary Correct
  int concurrency = 0;  // closed loop with this many requests in flight; 0: open loop
  RateProfile profile = RateProfile::Constant(100);  // open loop only
  double duration_s = 10;
  double warmup_s = 1;
  // Unary: the gRPC deadline. Stream: the stream ends this long after the run, failing what is
  // still unanswered.
  int deadline_ms = 5000;
  // An OK answer within this counts as goodput (RunResult::within_objective): --slo-p99.
  std::chrono::microseconds objective{1'000'000};
  uint64_t seed = 1;
  std::string priority;  // the requests' priority class ("": the server's default)
  // TLS: the CAs (PEM) the server's certificate must chain to; "" = plaintext. The name its
  // certificate must carry, when not the target's host ("" = the target's).
  std::string tls_ca_pem;
  std::string tls_server_name;
  std::string authorization;  // the authorization metadata ("Bearer <token>"); "" = none
  // Closed loop: after a refusal with the grpc-retry-pushback-ms trailer, the slot waits that
  // long before its next send, as a gRPC client with a retry policy does; false: at once.
  bool honor_pushback = false;
  std::vector<std::string> sentences;  // cycled; must not be empty
  // Called once the channels are connected, with the measured window's start and end, so that
  // whatever samples the server meanwhile can sample that window.
  std::function<void(Clock::time_point window_start, Clock::time_point window_end)> on_window;
};

// Connects every channel (UNAVAILABLE, naming the target, if one does not answer within 5 s;
// INVALID_ARGUMENT for no targets, fewer channels than targets or no sentences), drives the
// load, waits for the requests in flight to end, and returns what the window measured. In open
// loop a request's latency runs from its intended send time, so a client or server that falls
// behind shows up as latency rather than as fewer requests (no coordinated omission).
absl::StatusOr<RunResult> RunLoad(const RunConfig& config);

// Channel `index` of a run, not yet connected: to targets[index % targets.size()] (targets must
// not be empty), with the run's TLS settings, and its own TCP connection (channels with equal
// args would share one), so that the kernel spreads a run's channels over the server's
// SO_REUSEPORT workers and each channel stays with one worker.
std::shared_ptr<grpc::Channel> NewLoadChannel(const RunConfig& config, int index);

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_LOAD_RUNNER_H_
