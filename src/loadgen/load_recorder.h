#ifndef GECD_LOADGEN_LOAD_RECORDER_H_
#define GECD_LOADGEN_LOAD_RECORDER_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "loadgen/latency_histogram.h"

namespace gecd::loadgen {

using Clock = std::chrono::steady_clock;

// One second of a run, by completion time (sent: by intended send time).
struct SecondStats {
  uint64_t sent = 0;
  uint64_t ok = 0;
  uint64_t errors = 0;
  LatencyHistogram ok_latency{5};
};

// What a run measured. Latency percentiles are of successful requests only: a fast
// RESOURCE_EXHAUSTED would otherwise make an overloaded server look quick. Refusals (the
// server shedding load with RESOURCE_EXHAUSTED) are counted among the errors and also on their
// own, with their latency: shedding is only useful when it is fast.
// Latency by the length of the sentence sent, in UTF-8 bytes: [0, 64), [64, 128), [128, 256),
// [256, ∞): a long sentence costs the server many times a short one, and a p99 over a mix can
// hide that the long ones miss the objective.
inline constexpr size_t kLengthBuckets = 4;
inline constexpr size_t kLengthBucketFloors[kLengthBuckets] = {0, 64, 128, 256};
size_t LengthBucketOf(size_t text_bytes);
// "0-63 B", "64-127 B", "128-255 B", "256+ B".
std::string LengthBucketName(size_t bucket);

struct RunResult {
  double duration_s = 0;  // the measured window, warmup excluded
  // Open loop: from the window's start to its last request's completion, at least duration_s:
  // above capacity a backlog drains after the window, and the rate must count that time. Closed
  // loop: duration_s (see LoadRecorder).
  double elapsed_s = 0;
  uint64_t sent = 0;
  uint64_t ok = 0;
  std::map<std::string, uint64_t> errors;  // by gRPC status code name
  LatencyHistogram ok_latency;
  // OK answers within the objective (the recorder's `objective`): goodput.
  uint64_t within_objective = 0;
  std::array<LatencyHistogram, kLengthBuckets> ok_latency_by_length;
  uint64_t refused = 0;  // RESOURCE_EXHAUSTED, also in `errors`
  LatencyHistogram refused_latency;
  std::vector<SecondStats> timeline;

  uint64_t error_count() const;
  // Refusals among the completed requests.
  double refused_rate() const;
  double achieved_qps() const { return elapsed_s > 0 ? ok / elapsed_s : 0; }
  double goodput_qps() const { return elapsed_s > 0 ? within_objective / elapsed_s : 0; }
};

// The outcome of a sentence that its stream ended OK without answering: a server bug, which
// must not pass for a gRPC code.
inline constexpr int kUnanswered = -1;

// The upper-case gRPC name of a status code ("RESOURCE_EXHAUSTED"), "UNANSWERED" for
// kUnanswered, "CODE_<n>" if unknown.
std::string StatusCodeName(int code);

// Collects outcomes from the client threads.
//
// Open loop (kBySendTime): requests intended before the window's start (warmup) are not
// counted; those intended inside it are counted whenever they complete, so the slow tail of the
// last second is not dropped, and the rates divide by the time until the last of them completed.
//
// Closed loop (kByCompletionTime): the clients keep the same number of requests in flight
// throughout, so the rate is what completes inside the window, whenever it was sent, per second
// of window. Counted by send time, a closed loop's rate was divided by the time until its slowest
// last request ended: a server that holds refusals of clients re-sending at once (up to seconds)
// would show a rate far below what it served (session 19: 127 req/s counted, 220 completed).
class LoadRecorder {
 public:
  enum class Counting { kBySendTime, kByCompletionTime };
  // `objective`: an OK answer within it counts as goodput.
  LoadRecorder(Clock::time_point window_start, Clock::time_point window_end,
               std::chrono::microseconds objective, Counting counting = Counting::kBySendTime);

  bool InWindow(Clock::time_point intended) const {
    return intended >= window_start_ && intended < window_end_;
  }
  void RecordSent(Clock::time_point intended) ABSL_LOCKS_EXCLUDED(mu_);
  // code: a gRPC status code, 0 for OK; text_bytes: the sentence's length.
  void RecordDone(Clock::time_point intended, Clock::time_point done, int code, size_t text_bytes)
      ABSL_LOCKS_EXCLUDED(mu_);

  RunResult Finish() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  SecondStats& SecondOf(Clock::time_point t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock::time_point window_start_;
  const Clock::time_point window_end_;
  const int64_t objective_us_;
  const Counting counting_;
  Mutex mu_;
  Clock::time_point last_done_ ABSL_GUARDED_BY(mu_);
  RunResult result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_LOAD_RECORDER_H_
