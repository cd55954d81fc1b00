#include "loadgen/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace gecd::loadgen {

LatencyHistogram::LatencyHistogram(int precision_bits) : precision_bits_(precision_bits) {}

// Bucket b < 2^p holds exactly b. Above, each power of two [2^e, 2^(e+1)) is split into 2^p
// equal buckets.
int LatencyHistogram::BucketOf(int64_t micros) const {
  const uint64_t v = static_cast<uint64_t>(micros);
  const int sub = 1 << precision_bits_;
  if (v < static_cast<uint64_t>(sub)) return static_cast<int>(v);
  const int exponent = std::bit_width(v) - 1;
  const int shift = exponent - precision_bits_;
  return sub + shift * sub + static_cast<int>((v >> shift) - sub);
}

int64_t LatencyHistogram::LowestIn(int bucket) const {
  const int sub = 1 << precision_bits_;
  if (bucket < sub) return bucket;
  const int shift = (bucket - sub) / sub;
  const int64_t mantissa = sub + (bucket - sub) % sub;
  return mantissa << shift;
}

void LatencyHistogram::Record(int64_t micros) {
  micros = std::max<int64_t>(micros, 0);
  const int bucket = BucketOf(micros);
  if (bucket >= static_cast<int>(counts_.size())) counts_.resize(bucket + 1);
  ++counts_[bucket];
  min_ = count_ == 0 ? micros : std::min(min_, micros);
  max_ = std::max(max_, micros);
  sum_ += micros;
  ++count_;
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  if (other.counts_.size() > counts_.size()) counts_.resize(other.counts_.size());
  for (size_t i = 0; i < other.counts_.size(); ++i) counts_[i] += other.counts_[i];
  min_ = count_ == 0 ? other.min_ : std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  sum_ += other.sum_;
  count_ += other.count_;
}

int64_t LatencyHistogram::Percentile(double q) const {
  if (count_ == 0) return 0;
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * count_)));
  uint64_t seen = 0;
  for (size_t b = 0; b < counts_.size(); ++b) {
    seen += counts_[b];
    if (seen < rank) continue;
    const int64_t low = LowestIn(static_cast<int>(b));
    const int64_t high = LowestIn(static_cast<int>(b) + 1) - 1;
    return std::clamp(low + (high - low) / 2, min_, max_);
  }
  return max_;
}

}  // namespace gecd::loadgen
