#ifndef GECD_METRICS_METRICS_H_
#define GECD_METRICS_METRICS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "daemon/client_counters.h"
#include "daemon/histogram.h"

// Server metrics kept in the shared segment's metrics region: one ProcessMetrics block per
// process (block 0 the engine, block 1 + i worker i), so no two processes ever write the same
// cache line. Writers use relaxed atomics; the supervisor sums the blocks for /metrics. The
// blocks outlive the processes, so counters stay monotonic across restarts; the supervisor
// zeroes a dead process's gauges.
namespace gecd::metrics {

// The counters of one process. Every method is lock-free and safe from any thread of the
// owning process.
class ProcessMetrics {
 public:
  // gRPC status codes 0..16; anything else is counted as UNKNOWN (2).
  static constexpr int kNumCodes = 17;

  // Why admission refused a sentence (gecd_requests_shed_total{reason}): server.max_in_flight,
  // the latency objective (server.slo_p99_ms), or the call's deadline when sooner.
  enum ShedReason { kShedMaxInFlight, kShedSlo, kShedDeadline, kNumShedReasons };
  // The priority class of a refused sentence (gecd_requests_shed_total{priority}).
  enum ShedPriority { kShedInteractive, kShedBatch, kNumShedPriorities };

  // Workers: a request passed admission / left (answered or failed).
  void RequestAdmitted() { concurrency_.fetch_add(1, std::memory_order_relaxed); }
  void RequestReleased() { concurrency_.fetch_sub(1, std::memory_order_relaxed); }
  // Workers: every RPC answered, admitted or not, with its gRPC code and duration.
  void RequestFinished(int grpc_code, double seconds);
  // Workers: a request of a client authenticated by its bearer token (auth.tokens_file) was
  // answered with `grpc_code`: gecd_client_requests_total{client, code} (daemon/client_counters.h:
  // the first 16 names per process, later ones as "other").
  void ClientRequestFinished(std::string_view client, int grpc_code) {
    clients_.Add(client, grpc_code);
  }
  // Workers: an answer (OK) within the latency objective and the call's deadline: goodput.
  void RequestWithinObjective() { goodput_.fetch_add(1, std::memory_order_relaxed); }
  // Workers: an admitted sentence answered in `ratio` times the time admission predicted.
  void ObservePredictionRatio(double ratio);
  // Workers: a sentence refused at admission (also counted by RequestFinished).
  void RequestShed(ShedReason reason, ShedPriority priority) {
    shed_[reason][priority].fetch_add(1, std::memory_order_relaxed);
  }
  // Workers: refusals the refusal pacer holds now, and whether they wait in a storm of clients
  // that re-send at once (worker/refusal_pacer.h).
  void SetRefusalsHeld(int64_t held, bool storm) {
    refusals_held_.store(held, std::memory_order_relaxed);
    refusal_storm_.store(storm ? 1 : 0, std::memory_order_relaxed);
  }
  // Workers: a refusal storm began / was left because its queue kept growing (an open loop's).
  void RefusalStormBegun() { refusal_storms_.fetch_add(1, std::memory_order_relaxed); }
  void RefusalStormLeftForGrowth() {
    refusal_storms_left_for_growth_.fetch_add(1, std::memory_order_relaxed);
  }
  // Workers: a CorrectStream call began / ended (its reactor was deleted).
  void StreamOpened() { open_streams_.fetch_add(1, std::memory_order_relaxed); }
  void StreamClosed() { open_streams_.fetch_sub(1, std::memory_order_relaxed); }
  // Workers: time from the RPC's arrival to its first generated token.
  void ObserveTimeToFirstToken(double seconds);
  // Workers: the spelling stage of one request took `seconds`, looked `lookups` words up in
  // Hunspell, and left `skipped` candidate words unchecked because its budget ran out.
  void ObserveSpelling(double seconds, int lookups, int skipped);
  // Workers: a sentence of a whole text answered from the sentence cache, or not found there.
  void SentenceCacheHit() { sentence_cache_hits_.fetch_add(1, std::memory_order_relaxed); }
  void SentenceCacheMiss() { sentence_cache_misses_.fetch_add(1, std::memory_order_relaxed); }
  // Engine: one step ran `sequences` sequences and took `seconds` (the backend's step, from
  // its start to its tokens committed).
  void ObserveBatch(int sequences, double seconds);
  // Engine: tokens prefilled (prompt) and generated.
  void AddPromptTokens(uint64_t n) { prompt_tokens_.fetch_add(n, std::memory_order_relaxed); }
  void AddGeneratedTokens(uint64_t n) { generated_tokens_.fetch_add(n, std::memory_order_relaxed); }
  // Engine: speculative decoding's drafts equal to the greedy choice (kept) and not.
  void AddSpeculativeTokens(uint64_t accepted, uint64_t rejected) {
    speculative_accepted_.fetch_add(accepted, std::memory_order_relaxed);
    speculative_rejected_.fetch_add(rejected, std::memory_order_relaxed);
  }
  // Engine: one sequence's share of a step emitted `tokens` tokens (more than 1: drafts kept).
  void ObserveTokensPerSequenceStep(int tokens);
  // Engine: a sequence freed before it finished (client cancelled, deadline, worker died).
  void SequenceCancelled() { cancelled_sequences_.fetch_add(1, std::memory_order_relaxed); }
  // Engine: a sequence dropped before it started because its deadline passed while it waited.
  void SequenceExpired() { expired_sequences_.fetch_add(1, std::memory_order_relaxed); }
  // Worker: a connection closed at once, past server.max_tls_handshakes accepted within the
  // handshake timeout (worker/connection_gate.h).
  void TlsConnectionRefused() { tls_connections_refused_.fetch_add(1, std::memory_order_relaxed); }
  // Engine gauges: KV blocks in use / total, and sequences waiting for admission.
  void SetKvCacheUsage(double ratio);
  void SetQueueDepth(int64_t n) { queue_depth_.store(n, std::memory_order_relaxed); }
  // Engine gauges: its measured step time, fixed + per_sequence * sequences (seconds).
  void SetStepTime(double fixed_seconds, double per_sequence_seconds);

  // Supervisor: the process died; its in-flight gauges no longer hold.
  void ResetGauges();

 private:
  friend class MetricsRegion;

  alignas(64) std::array<std::atomic<uint64_t>, kNumCodes> requests_;
  std::atomic<int64_t> concurrency_;
  std::array<std::array<std::atomic<uint64_t>, kNumShedPriorities>, kNumShedReasons> shed_;
  std::atomic<uint64_t> goodput_;
  std::atomic<int64_t> open_streams_;
  std::atomic<uint64_t> prompt_tokens_;
  std::atomic<uint64_t> generated_tokens_;
  std::atomic<uint64_t> cancelled_sequences_;
  std::atomic<uint64_t> expired_sequences_;
  std::atomic<uint64_t> kv_cache_usage_bits_;  // a double's bits
  std::atomic<int64_t> queue_depth_;
  std::atomic<uint64_t> step_fixed_bits_;         // a double's bits
  std::atomic<uint64_t> step_per_sequence_bits_;  // a double's bits
  daemon::HistogramBlock request_duration_;
  daemon::HistogramBlock time_to_first_token_;
  daemon::HistogramBlock batch_size_;
  daemon::HistogramBlock step_duration_;
  daemon::HistogramBlock spelling_duration_;
  daemon::HistogramBlock prediction_ratio_;
  std::atomic<uint64_t> spelling_lookups_;
  std::atomic<uint64_t> spelling_skipped_;
  daemon::ClientCounters clients_;
  std::atomic<uint64_t> sentence_cache_hits_;
  std::atomic<uint64_t> sentence_cache_misses_;
  std::atomic<uint64_t> speculative_accepted_;
  std::atomic<uint64_t> speculative_rejected_;
  daemon::HistogramBlock tokens_per_sequence_step_;
  std::atomic<uint64_t> tls_connections_refused_;
  std::atomic<int64_t> refusals_held_;
  std::atomic<int64_t> refusal_storm_;  // 0 or 1
  std::atomic<uint64_t> refusal_storms_;
  std::atomic<uint64_t> refusal_storms_left_for_growth_;
};

// The sum of all blocks at one moment (each counter read once, relaxed).
struct MetricsSnapshot {
  std::array<uint64_t, ProcessMetrics::kNumCodes> requests{};
  int64_t concurrency = 0;
  // [reason][priority]
  std::array<std::array<uint64_t, ProcessMetrics::kNumShedPriorities>,
             ProcessMetrics::kNumShedReasons>
      shed{};
  uint64_t goodput = 0;
  int64_t open_streams = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t cancelled_sequences = 0;
  uint64_t expired_sequences = 0;
  uint64_t tls_connections_refused = 0;
  int64_t refusals_held = 0;
  int64_t refusal_storm_workers = 0;
  uint64_t refusal_storms = 0;
  uint64_t refusal_storms_left_for_growth = 0;
  double kv_cache_usage = 0;
  int64_t queue_depth = 0;
  double step_fixed_seconds = 0;
  double step_per_sequence_seconds = 0;
  // The pod's admission margin (ipc::SharedMargin) and the line admission predicts from (the
  // time between two steps of one sequence, ipc::StepTime): not in the blocks; the supervisor
  // reads them from the segment.
  double admission_margin = 1;
  // Its late mark (worker/admission.h), faded to now, and the sentences in flight the late
  // sentences it rests on were admitted with.
  double admission_late_mark = 0.7;
  int64_t admission_late_mark_in_flight = 0;
  double admission_step_fixed_seconds = 0;
  double admission_step_per_sequence_seconds = 0;
  using Histogram = daemon::HistogramCounts;
  Histogram request_duration;
  Histogram time_to_first_token;
  Histogram batch_size;
  Histogram step_duration;
  Histogram spelling_duration;
  Histogram prediction_ratio;
  uint64_t spelling_lookups = 0;
  uint64_t spelling_skipped = 0;
  // By authenticated client name (and "other"), by code.
  daemon::ClientTotals clients;
  uint64_t sentence_cache_hits = 0;
  uint64_t sentence_cache_misses = 0;
  uint64_t speculative_accepted = 0;
  uint64_t speculative_rejected = 0;
  Histogram tokens_per_sequence_step;
};

// A view of the metrics region: placement and lookup of the per-process blocks.
class MetricsRegion {
 public:
  static constexpr int kEngineIndex = 0;
  static int WorkerIndex(int worker) { return 1 + worker; }

  // Bytes for `num_processes` blocks (engine + workers): SegmentOptions.metrics_bytes.
  static size_t BytesFor(int num_processes);
  // Constructs zeroed blocks over the whole region; the supervisor, before starting children.
  static MetricsRegion Initialize(std::span<uint8_t> region);
  // Views a region the supervisor initialized (children).
  explicit MetricsRegion(std::span<uint8_t> region);

  int num_processes() const { return num_processes_; }
  // Block `index` (kEngineIndex or WorkerIndex(i)); nullptr when out of range.
  ProcessMetrics* ForProcess(int index) const;
  MetricsSnapshot Sum() const;

 private:
  ProcessMetrics* blocks_ = nullptr;
  int num_processes_ = 0;
};

// Prometheus text exposition format (version 0.0.4) of `snapshot` plus the supervisor's
// restart counts by process kind ("engine", "worker").
std::string FormatPrometheus(const MetricsSnapshot& snapshot,
                             const std::map<std::string, uint64_t>& restarts);

}  // namespace gecd::metrics

#endif  // GECD_METRICS_METRICS_H_
