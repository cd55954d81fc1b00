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

// Owns the worker's count of admitted-but-unfinished sentences and the rate at which it finishes
// them, and decides on each arrival. The predicted wait of a new sentence is in_flight / rate:
// the time until the sentences ahead of it have finished.
//
// The rate comes from Little's law, rate = L / W: L the sentences held on average over busy time,
// W how long a sentence took from admission to release, both smoothed over busy time. The engine
// batches, so the sentences in flight finish together, not one after another: a rate counted
// from completions alone lags every rise in load by a sentence's whole response time, and so is
// lowest after a cold start (the first completion over the first sentence's latency, while all
// the others ran alongside it). Refusing on such a rate kept the load low and the completions
// measured at that load confirmed it; L / W follows the load at once. The sentences still in
// flight count as taking at least their mean age so far, so an engine that stops answering
// (or has not answered yet) raises W and the wait it predicts, and what is admitted stays
// bounded. A sentence with nothing ahead is always admitted, so W keeps being measured however
// slow one sentence is. Idle time counts for nothing. The engine is shared by all workers, so
// each worker measures its own share of the engine's throughput, and its own queue against it.
// Thread-safe.
class AdmissionController {
 public:
  // Monotonic time in microseconds; tests pass a fake.
  using Clock = std::function<int64_t()>;
  static constexpr std::chrono::microseconds kNoDeadline = std::chrono::microseconds::max();

  struct Options {
    int max_in_flight = 1024;                  // server.max_in_flight
    std::chrono::milliseconds max_queue{500};  // server.max_queue_ms; 0 = only the deadline
    // The smoothing time constant (busy time) of L and W.
    std::chrono::milliseconds smoothing{1000};
  };

  enum class Refusal { kNone, kMaxInFlight, kMaxQueue, kDeadline };
  struct Decision {
    Refusal refusal = Refusal::kNone;
    std::string message;      // why, for the client; empty when admitted
    int64_t admitted_us = 0;  // when admitted (the clock's time), for Release
    bool admitted() const { return refusal == Refusal::kNone; }
  };

  AdmissionController(Options options, Clock clock);

  // Admits one sentence whose deadline is `budget` from now (kNoDeadline: none), counting it in
  // flight, or says why not. Every admitted sentence must be Released once, with its decision's
  // admitted_us.
  Decision Admit(std::chrono::microseconds budget);
  // An admitted sentence left the engine (answered or failed): one completion.
  void Release(int64_t admitted_us);

  int in_flight() const;
  // The rate the predictions assume (L / W, per second); 0 while nothing has been measured.
  double service_rate() const;

 private:
  // An exponentially weighted mean whose weights decay with busy time; no prior, so the first
  // value is the mean.
  struct DecayingMean {
    double sum = 0;
    double weight = 0;
    void Decay(double factor) {
      sum *= factor;
      weight *= factor;
    }
    void Add(double value, double value_weight) {
      sum += value * value_weight;
      weight += value_weight;
    }
  };

  // Folds the busy time since the last event into the means. Requires mu_.
  void Advance(int64_t now_us);
  // How long a sentence takes (W, seconds) and the rate: 0 while unknown. Require mu_.
  double SojournSeconds(int64_t now_us) const;
  double Rate(int64_t now_us) const;

  const Options options_;
  const Clock clock_;
  mutable std::mutex mu_;
  int in_flight_ = 0;
  int64_t admitted_us_sum_ = 0;  // of the sentences in flight, for their mean age
  int64_t last_event_us_ = 0;
  DecayingMean in_flight_mean_;  // L, weighted by busy time
  DecayingMean sojourn_mean_;    // W (seconds), one weight per completion
};

}  // namespace gecd::server

#endif  // GECD_SERVER_ADMISSION_H_
