#ifndef GECD_LOADGEN_LATENCY_HISTOGRAM_H_
#define GECD_LOADGEN_LATENCY_HISTOGRAM_H_

#include <cstdint>
#include <vector>

namespace gecd::loadgen {

// A log-linear histogram of latencies in microseconds, in the manner of HdrHistogram: values
// below 2^precision_bits are kept exactly, larger ones in buckets whose width is at most
// 2^-precision_bits of their value, so a percentile is off by less than that fraction whatever
// the range. Memory grows with the largest value seen, not with the number of samples, which is
// what lets gecd-load keep one per second of a long run. Not thread-safe.
class LatencyHistogram {
 public:
  explicit LatencyHistogram(int precision_bits = 7);

  void Record(int64_t micros);                // negative values count as 0
  void Merge(const LatencyHistogram& other);  // other must have the same precision

  uint64_t count() const { return count_; }
  int64_t min() const { return count_ == 0 ? 0 : min_; }
  int64_t max() const { return max_; }
  double mean() const { return count_ == 0 ? 0 : static_cast<double>(sum_) / count_; }

  // The nearest-rank q-quantile (q in [0, 1]) as the midpoint of its bucket, clamped to the
  // observed [min, max]; 0 when empty.
  int64_t Percentile(double q) const;

 private:
  int BucketOf(int64_t micros) const;
  int64_t LowestIn(int bucket) const;

  int precision_bits_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  int64_t sum_ = 0;
  int64_t min_ = 0;
  int64_t max_ = 0;
};

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_LATENCY_HISTOGRAM_H_
