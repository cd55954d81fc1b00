#ifndef GECD_SERVER_ADMISSION_H_
#define GECD_SERVER_ADMISSION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

// Deadline-aware admission for one worker: a sentence is refused at once (RESOURCE_EXHAUSTED)
// when the worker could not answer it in time, instead of queueing it until its deadline.
namespace gecd::server {

// Owns the worker's count of admitted-but-unfinished sentences and the measured rate at which
// they finish (completions per second of busy time, smoothed), and decides on each arrival.
// The predicted wait of a new sentence is in_flight / rate: the time until the sentences ahead
// of it have finished. A sentence with nothing ahead is always admitted, so the rate keeps being
// measured however slow one sentence is (refusing it would freeze a low estimate for good).
// The engine is shared by all workers, so each worker measures its own share of the engine's
// throughput, and its own queue against it. Until a rate has been measured (cold start) only
// max_in_flight applies. Thread-safe.
class AdmissionController {
 public:
  // Monotonic time in microseconds; tests pass a fake.
  using Clock = std::function<int64_t()>;
  static constexpr std::chrono::microseconds kNoDeadline = std::chrono::microseconds::max();

  struct Options {
    int max_in_flight = 1024;                   // server.max_in_flight
    std::chrono::milliseconds max_queue{500};  // server.max_queue_ms; 0 = only the deadline
    // Busy time per rate sample, and the smoothing time constant of the estimate.
    std::chrono::milliseconds sample_period{100};
    std::chrono::milliseconds smoothing{1000};
  };

  enum class Refusal { kNone, kMaxInFlight, kMaxQueue, kDeadline };
  struct Decision {
    Refusal refusal = Refusal::kNone;
    std::string message;  // why, for the client; empty when admitted
    bool admitted() const { return refusal == Refusal::kNone; }
  };

  AdmissionController(Options options, Clock clock);

  // Admits one sentence whose deadline is `budget` from now (kNoDeadline: none), counting it in
  // flight, or says why not. Every admitted sentence must be Released once.
  Decision Admit(std::chrono::microseconds budget);
  // An admitted sentence left the engine (answered or failed): one completion.
  void Release();

  int in_flight() const;
  // Completions per second of busy time; 0 until the first sample.
  double service_rate() const;

 private:
  // Folds the busy time and completions since the last sample into the estimate once a sample
  // period of busy time has passed. Requires mu_.
  void MaybeSample(int64_t now_us);

  const Options options_;
  const Clock clock_;
  mutable std::mutex mu_;
  int in_flight_ = 0;
  int64_t busy_since_us_ = 0;      // while in_flight_ > 0: start of the unsampled busy time
  int64_t unsampled_busy_us_ = 0;  // busy time before busy_since_us_ not yet sampled
  int64_t unsampled_completions_ = 0;
  double rate_ = 0;  // completions per second of busy time; 0 = no estimate yet
};

}  // namespace gecd::server

#endif  // GECD_SERVER_ADMISSION_H_
