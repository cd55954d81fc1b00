#include "metrics/metrics.h"

#include <bit>
#include <new>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/prometheus_text.h"

namespace gecd::metrics {
namespace {

// A histogram's fixed upper bounds and its unit: the value 1.0 is recorded as `units` units.
struct HistogramSpec {
  const char* name;
  const char* help;
  std::span<const double> bounds;
  double units;
};

using daemon::prometheus::AppendHeader;
using daemon::prometheus::AppendScalar;

constexpr double kBatchBounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
static_assert(std::size(kBatchBounds) <= daemon::HistogramBlock::kMaxBuckets);
static_assert(std::size(daemon::prometheus::kLatencyBounds) <= daemon::HistogramBlock::kMaxBuckets);

constexpr HistogramSpec kRequestDuration = {"gecd_request_duration_seconds",
                                            "Time from RPC arrival to its answer.",
                                            daemon::prometheus::kLatencyBounds, 1e6};
constexpr HistogramSpec kTimeToFirstToken = {"gecd_time_to_first_token_seconds",
                                             "Time from RPC arrival to the first generated token.",
                                             daemon::prometheus::kLatencyBounds, 1e6};
constexpr HistogramSpec kSpellingDuration = {"gecd_spelling_seconds",
                                             "Time the spelling stage took for one request.",
                                             daemon::prometheus::kLatencyBounds, 1e6};
// Actual over predicted time in the server; recorded in thousandths.
constexpr double kRatioBounds[] = {0.25, 0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 4};
constexpr HistogramSpec kPredictionRatio = {
    "gecd_admission_prediction_ratio",
    "Each admitted sentence's time in the server over the time admission predicted for it.",
    kRatioBounds, 1e3};
constexpr HistogramSpec kBatchSize = {"gecd_batch_size", "Sequences per engine step.", kBatchBounds,
                                      1};
// A step is a fraction of a millisecond on a GPU and tens of milliseconds on the CPU backend;
// the latency bounds would put every GPU step in their first bucket.
constexpr double kStepBounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                  0.05,   0.1,   0.2,   0.5,   1,    2};
static_assert(std::size(kStepBounds) <= daemon::HistogramBlock::kMaxBuckets);
constexpr HistogramSpec kStepDuration = {
    "gecd_engine_step_seconds",
    "Time one engine step took (the sequences in "
    "gecd_batch_size), from its start to its tokens committed.",
    kStepBounds, 1e6};
constexpr double kEmittedBounds[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64};
constexpr HistogramSpec kTokensPerSequenceStep = {
    "gecd_tokens_per_sequence_step",
    "Tokens one sequence's share of an engine step emitted (above 1: speculative drafts kept).",
    kEmittedBounds, 1};

constexpr std::string_view kShedReasonNames[ProcessMetrics::kNumShedReasons] = {"max_in_flight",
                                                                                "slo", "deadline"};
constexpr std::string_view kShedPriorityNames[ProcessMetrics::kNumShedPriorities] = {"interactive",
                                                                                     "batch"};

void Observe(daemon::HistogramBlock& h, const HistogramSpec& spec, double value) {
  h.Observe(spec.bounds, spec.units, value);
}

void AppendHistogram(std::string& out, const HistogramSpec& spec,
                     const MetricsSnapshot::Histogram& h) {
  daemon::prometheus::AppendHistogram(out, spec.name, spec.help, spec.bounds,
                                      std::span(h.counts).first(spec.bounds.size() + 1),
                                      static_cast<double>(h.sum_units) / spec.units);
}

}  // namespace

void ProcessMetrics::RequestFinished(int grpc_code, double seconds) {
  const int code = daemon::prometheus::CodeIndex(grpc_code);
  requests_[code].fetch_add(1, std::memory_order_relaxed);
  Observe(request_duration_, kRequestDuration, seconds);
}

void ProcessMetrics::ObserveTimeToFirstToken(double seconds) {
  Observe(time_to_first_token_, kTimeToFirstToken, seconds);
}

void ProcessMetrics::ObserveSpelling(double seconds, int lookups, int skipped) {
  Observe(spelling_duration_, kSpellingDuration, seconds);
  spelling_lookups_.fetch_add(static_cast<uint64_t>(lookups), std::memory_order_relaxed);
  spelling_skipped_.fetch_add(static_cast<uint64_t>(skipped), std::memory_order_relaxed);
}

void ProcessMetrics::ObservePredictionRatio(double ratio) {
  Observe(prediction_ratio_, kPredictionRatio, ratio);
}

void ProcessMetrics::ObserveBatch(int sequences, double seconds) {
  Observe(batch_size_, kBatchSize, sequences);
  Observe(step_duration_, kStepDuration, seconds);
}

void ProcessMetrics::ObserveTokensPerSequenceStep(int tokens) {
  Observe(tokens_per_sequence_step_, kTokensPerSequenceStep, tokens);
}

void ProcessMetrics::SetKvCacheUsage(double ratio) {
  kv_cache_usage_bits_.store(std::bit_cast<uint64_t>(ratio), std::memory_order_relaxed);
}

void ProcessMetrics::SetStepTime(double fixed_seconds, double per_sequence_seconds) {
  step_fixed_bits_.store(std::bit_cast<uint64_t>(fixed_seconds), std::memory_order_relaxed);
  step_per_sequence_bits_.store(std::bit_cast<uint64_t>(per_sequence_seconds),
                                std::memory_order_relaxed);
}

void ProcessMetrics::ResetGauges() {
  concurrency_.store(0, std::memory_order_relaxed);
  open_streams_.store(0, std::memory_order_relaxed);
  kv_cache_usage_bits_.store(std::bit_cast<uint64_t>(0.0), std::memory_order_relaxed);
  queue_depth_.store(0, std::memory_order_relaxed);
  SetRefusalsHeld(0, false);
  SetStepTime(0, 0);
}

size_t MetricsRegion::BytesFor(int num_processes) {
  return static_cast<size_t>(num_processes) * sizeof(ProcessMetrics);
}

MetricsRegion MetricsRegion::Initialize(std::span<uint8_t> region) {
  const size_t n = region.size() / sizeof(ProcessMetrics);
  for (size_t i = 0; i < n; ++i) new (region.data() + i * sizeof(ProcessMetrics)) ProcessMetrics();
  return MetricsRegion(region);
}

MetricsRegion::MetricsRegion(std::span<uint8_t> region)
    : blocks_(std::launder(reinterpret_cast<ProcessMetrics*>(region.data()))),
      num_processes_(static_cast<int>(region.size() / sizeof(ProcessMetrics))) {}

ProcessMetrics* MetricsRegion::ForProcess(int index) const {
  return index >= 0 && index < num_processes_ ? &blocks_[index] : nullptr;
}

MetricsSnapshot MetricsRegion::Sum() const {
  MetricsSnapshot s;
  for (int p = 0; p < num_processes_; ++p) {
    const ProcessMetrics& m = blocks_[p];
    for (int c = 0; c < ProcessMetrics::kNumCodes; ++c) {
      s.requests[c] += m.requests_[c].load(std::memory_order_relaxed);
    }
    s.concurrency += m.concurrency_.load(std::memory_order_relaxed);
    for (int r = 0; r < ProcessMetrics::kNumShedReasons; ++r) {
      for (int p = 0; p < ProcessMetrics::kNumShedPriorities; ++p) {
        s.shed[r][p] += m.shed_[r][p].load(std::memory_order_relaxed);
      }
    }
    s.goodput += m.goodput_.load(std::memory_order_relaxed);
    s.open_streams += m.open_streams_.load(std::memory_order_relaxed);
    s.prompt_tokens += m.prompt_tokens_.load(std::memory_order_relaxed);
    s.generated_tokens += m.generated_tokens_.load(std::memory_order_relaxed);
    s.cancelled_sequences += m.cancelled_sequences_.load(std::memory_order_relaxed);
    s.tls_connections_refused += m.tls_connections_refused_.load(std::memory_order_relaxed);
    s.refusals_held += m.refusals_held_.load(std::memory_order_relaxed);
    s.refusal_storm_workers += m.refusal_storm_.load(std::memory_order_relaxed);
    s.refusal_storms += m.refusal_storms_.load(std::memory_order_relaxed);
    s.refusal_storms_left_for_growth +=
        m.refusal_storms_left_for_growth_.load(std::memory_order_relaxed);
    s.expired_sequences += m.expired_sequences_.load(std::memory_order_relaxed);
    s.kv_cache_usage +=
        std::bit_cast<double>(m.kv_cache_usage_bits_.load(std::memory_order_relaxed));
    s.queue_depth += m.queue_depth_.load(std::memory_order_relaxed);
    s.step_fixed_seconds +=
        std::bit_cast<double>(m.step_fixed_bits_.load(std::memory_order_relaxed));
    s.step_per_sequence_seconds +=
        std::bit_cast<double>(m.step_per_sequence_bits_.load(std::memory_order_relaxed));
    daemon::AddTo(s.request_duration, m.request_duration_);
    daemon::AddTo(s.time_to_first_token, m.time_to_first_token_);
    daemon::AddTo(s.batch_size, m.batch_size_);
    daemon::AddTo(s.step_duration, m.step_duration_);
    daemon::AddTo(s.spelling_duration, m.spelling_duration_);
    daemon::AddTo(s.prediction_ratio, m.prediction_ratio_);
    s.spelling_lookups += m.spelling_lookups_.load(std::memory_order_relaxed);
    s.spelling_skipped += m.spelling_skipped_.load(std::memory_order_relaxed);
    m.clients_.SumInto(s.clients);
    s.sentence_cache_hits += m.sentence_cache_hits_.load(std::memory_order_relaxed);
    s.sentence_cache_misses += m.sentence_cache_misses_.load(std::memory_order_relaxed);
    s.speculative_accepted += m.speculative_accepted_.load(std::memory_order_relaxed);
    s.speculative_rejected += m.speculative_rejected_.load(std::memory_order_relaxed);
    daemon::AddTo(s.tokens_per_sequence_step, m.tokens_per_sequence_step_);
  }
  return s;
}

std::string FormatPrometheus(const MetricsSnapshot& s,
                             const std::map<std::string, uint64_t>& restarts) {
  std::string out;
  AppendHeader(out, "gecd_requests_total", "RPCs answered, by gRPC status code.", "counter");
  for (int c = 0; c < ProcessMetrics::kNumCodes; ++c) {
    // OK always, so the series exists before the first request; other codes once seen.
    if (c != 0 && s.requests[c] == 0) continue;
    absl::StrAppend(&out, "gecd_requests_total{code=\"",
                    std::string(daemon::prometheus::CodeName(c)), "\"} ", s.requests[c], "\n");
  }
  AppendScalar(out, "gecd_request_concurrency", "Requests admitted and not yet answered.", "gauge",
               absl::StrCat(s.concurrency));
  daemon::AppendClientTotals(
      out, "gecd_client_requests_total",
      "Requests of clients authenticated by bearer token (auth.tokens_file), by the token's name "
      "(\"other\" past 16 names) and gRPC status code.",
      s.clients);
  AppendHeader(out, "gecd_requests_shed_total",
               "Requests refused at admission (RESOURCE_EXHAUSTED; a whole text counts once: its "
               "sentences are admitted together), by reason and priority class.",
               "counter");
  for (int r = 0; r < ProcessMetrics::kNumShedReasons; ++r) {
    for (int p = 0; p < ProcessMetrics::kNumShedPriorities; ++p) {
      absl::StrAppend(&out, "gecd_requests_shed_total{reason=\"", std::string(kShedReasonNames[r]),
                      "\",priority=\"", std::string(kShedPriorityNames[p]), "\"} ", s.shed[r][p],
                      "\n");
    }
  }
  AppendScalar(out, "gecd_goodput_requests_total",
               "Requests answered OK within the latency objective (server.slo_p99_ms) and their "
               "deadline.",
               "counter", absl::StrCat(s.goodput));
  AppendScalar(out, "gecd_refusals_held",
               "Refusals the workers hold back now (server.max_refusals_per_second's pacing: "
               "beyond its allowance up to 3 ms, in a storm until their turn).",
               "gauge", absl::StrCat(s.refusals_held));
  AppendScalar(out, "gecd_refusal_storm_workers",
               "Workers in a refusal storm now: clients re-sending refusals at once, whose "
               "refusals wait for the allowance.",
               "gauge", absl::StrCat(s.refusal_storm_workers));
  AppendScalar(out, "gecd_refusal_storms_total", "Refusal storms begun.", "counter",
               absl::StrCat(s.refusal_storms));
  AppendScalar(out, "gecd_refusal_storms_left_for_growth_total",
               "Refusal storms left because their queue, with the calls admitted in flight, kept "
               "growing: an open loop's calls, which holding does not slow.",
               "counter", absl::StrCat(s.refusal_storms_left_for_growth));
  AppendHistogram(out, kPredictionRatio, s.prediction_ratio);
  AppendScalar(out, "gecd_open_streams", "CorrectStream calls open.", "gauge",
               absl::StrCat(s.open_streams));
  AppendHistogram(out, kRequestDuration, s.request_duration);
  AppendHistogram(out, kTimeToFirstToken, s.time_to_first_token);
  AppendHistogram(out, kBatchSize, s.batch_size);
  AppendHistogram(out, kStepDuration, s.step_duration);
  AppendScalar(out, "gecd_prompt_tokens_total", "Prompt tokens prefilled.", "counter",
               absl::StrCat(s.prompt_tokens));
  AppendScalar(out, "gecd_generated_tokens_total", "Tokens generated.", "counter",
               absl::StrCat(s.generated_tokens));
  AppendHeader(out, "gecd_speculative_tokens_total",
               "Draft tokens speculative decoding verified: accepted (equal to the greedy choice, "
               "kept) or rejected.",
               "counter");
  absl::StrAppend(&out, "gecd_speculative_tokens_total{result=\"accepted\"} ",
                  s.speculative_accepted, "\n");
  absl::StrAppend(&out, "gecd_speculative_tokens_total{result=\"rejected\"} ",
                  s.speculative_rejected, "\n");
  AppendHistogram(out, kTokensPerSequenceStep, s.tokens_per_sequence_step);
  AppendScalar(out, "gecd_cancelled_sequences_total",
               "Sequences the engine stopped before they finished (cancelled, expired, orphaned).",
               "counter", absl::StrCat(s.cancelled_sequences));
  AppendScalar(out, "gecd_expired_sequences_total",
               "Sequences the engine dropped before they started: their deadline passed while they "
               "waited.",
               "counter", absl::StrCat(s.expired_sequences));
  AppendScalar(out, "gecd_kv_cache_usage_ratio", "Fraction of KV-cache blocks in use.", "gauge",
               absl::StrFormat("%g", s.kv_cache_usage));
  AppendScalar(out, "gecd_queue_depth", "Sequences waiting for the engine to admit them.", "gauge",
               absl::StrCat(s.queue_depth));
  AppendScalar(out, "gecd_engine_step_fixed_seconds",
               "The engine's measured decoding step: its part independent of the batch (a step "
               "of n sequences takes fixed + per_sequence * n, besides what prefill chunks and "
               "drafts add).",
               "gauge", absl::StrFormat("%g", s.step_fixed_seconds));
  AppendScalar(out, "gecd_engine_step_per_sequence_seconds",
               "The engine's measured decoding step: its part per sequence in the step.", "gauge",
               absl::StrFormat("%g", s.step_per_sequence_seconds));
  AppendScalar(out, "gecd_admission_step_fixed_seconds",
               "What admission predicts from: the time between two steps of one sequence with n "
               "sequences running, fixed + per_sequence * n (with engine.speculate_tokens, a step "
               "that also verifies drafts); its part independent of n.",
               "gauge", absl::StrFormat("%g", s.admission_step_fixed_seconds));
  AppendScalar(out, "gecd_admission_step_per_sequence_seconds",
               "What admission predicts from: the time between two steps of one sequence, its "
               "part per sequence running.",
               "gauge", absl::StrFormat("%g", s.admission_step_per_sequence_seconds));
  AppendScalar(out, "gecd_admission_margin",
               "What admission multiplies its predicted times by before comparing them with the "
               "latency objective or deadline (0.7-2.5, steered by late answers): above 1 it "
               "refuses sooner than predicted times alone would.",
               "gauge", absl::StrFormat("%g", s.admission_margin));
  AppendScalar(out, "gecd_admission_late_mark",
               "The least margin admission applies while the pod holds at least 85% of "
               "gecd_admission_late_mark_in_flight sentences: 1.35 times the margin a late answer "
               "was admitted at, fading to 0.7 over about 30 s (0.7: no mark).",
               "gauge", absl::StrFormat("%g", s.admission_late_mark));
  AppendScalar(out, "gecd_admission_late_mark_in_flight",
               "The sentences in flight in the pod that the late answers behind "
               "gecd_admission_late_mark were admitted with (0: no mark).",
               "gauge", absl::StrCat(s.admission_late_mark_in_flight));
  AppendScalar(out, "gecd_tls_connections_refused_total",
               "Connections a worker closed at once: server.max_tls_handshakes had been accepted "
               "within server.tls_handshake_timeout_ms.",
               "counter", absl::StrCat(s.tls_connections_refused));
  AppendHistogram(out, kSpellingDuration, s.spelling_duration);
  AppendScalar(out, "gecd_spelling_lookups_total", "Words the spelling stage looked up.", "counter",
               absl::StrCat(s.spelling_lookups));
  AppendScalar(out, "gecd_spelling_skipped_words_total",
               "Words the spelling stage left unchecked: its per-request budget ran out.",
               "counter", absl::StrCat(s.spelling_skipped));
  AppendScalar(out, "gecd_sentence_cache_hits_total",
               "Sentences answered from the workers' sentence cache, without the engine.",
               "counter", absl::StrCat(s.sentence_cache_hits));
  AppendScalar(out, "gecd_sentence_cache_misses_total",
               "Sentences looked up in the sentence cache and not found.", "counter",
               absl::StrCat(s.sentence_cache_misses));
  AppendHeader(out, "gecd_process_restarts_total", "Child processes restarted after dying.",
               "counter");
  for (const auto& [process, count] : restarts) {
    absl::StrAppend(&out, "gecd_process_restarts_total{process=\"", process, "\"} ", count, "\n");
  }
  return out;
}

}  // namespace gecd::metrics
