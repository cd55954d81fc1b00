#ifndef GECD_DAEMON_HISTOGRAM_H_
#define GECD_DAEMON_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

// The lock-free histogram behind the Prometheus histograms of `gecd serve` (metrics/metrics.h,
// one per process block in shared memory) and of `gecd route` (route/route_metrics.h).
namespace gecd::daemon {

// Fixed-bucket histogram. Values are recorded in integer units (microseconds for durations,
// items for batch sizes) so the sum is an exact relaxed fetch_add.
struct HistogramBlock {
  static constexpr size_t kMaxBuckets = 16;  // finite upper bounds; one more slot for +Inf
  std::array<std::atomic<uint64_t>, kMaxBuckets + 1> counts;  // per bucket, not cumulative
  std::atomic<uint64_t> sum_units;

  // Counts `value` in its bucket of `bounds` (ascending, at most kMaxBuckets; "le": a value
  // equal to a bound is in that bound's bucket) and adds it, as value * `units`, to the sum.
  void Observe(std::span<const double> bounds, double units, double value);
};

// A histogram's counts at one moment, summed over blocks.
struct HistogramCounts {
  std::array<uint64_t, HistogramBlock::kMaxBuckets + 1> counts{};
  uint64_t sum_units = 0;
};

// Adds the block's counts and sum (each read once, relaxed) to `sum`.
void AddTo(HistogramCounts& sum, const HistogramBlock& h);

}  // namespace gecd::daemon

#endif  // GECD_DAEMON_HISTOGRAM_H_
