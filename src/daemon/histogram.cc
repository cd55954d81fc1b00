#include "daemon/histogram.h"

#include <algorithm>
#include <cmath>

namespace gecd::daemon {

void HistogramBlock::Observe(std::span<const double> bounds, double units, double value) {
  const size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  counts[bucket].fetch_add(1, std::memory_order_relaxed);
  const double scaled = std::max(0.0, std::round(value * units));
  sum_units.fetch_add(static_cast<uint64_t>(scaled), std::memory_order_relaxed);
}

void AddTo(HistogramCounts& sum, const HistogramBlock& h) {
  for (size_t i = 0; i < h.counts.size(); ++i) {
    sum.counts[i] += h.counts[i].load(std::memory_order_relaxed);
  }
  sum.sum_units += h.sum_units.load(std::memory_order_relaxed);
}

}  // namespace gecd::daemon
