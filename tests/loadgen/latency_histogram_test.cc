#include "loadgen/latency_histogram.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::loadgen {
namespace {

TEST(LatencyHistogramTest, EmptyReportsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.Percentile(0.99), 0);
  EXPECT_EQ(h.mean(), 0);
}

TEST(LatencyHistogramTest, SmallValuesAreExactNearestRank) {
  LatencyHistogram h;
  for (int v = 100; v >= 1; --v) h.Record(v);
  EXPECT_EQ(h.Percentile(0.5), 50);
  EXPECT_EQ(h.Percentile(0.9), 90);
  EXPECT_EQ(h.Percentile(0.99), 99);
  EXPECT_EQ(h.Percentile(1.0), 100);
  EXPECT_EQ(h.Percentile(0.0), 1);
  EXPECT_EQ(h.min(), 1);
  EXPECT_EQ(h.max(), 100);
  EXPECT_DOUBLE_EQ(h.mean(), 50.5);
}

TEST(LatencyHistogramTest, NegativeCountsAsZero) {
  LatencyHistogram h;
  h.Record(-5);
  EXPECT_EQ(h.Percentile(1.0), 0);
  EXPECT_EQ(h.min(), 0);
}

// Against exact nearest-rank percentiles of sorted samples spanning microseconds to minutes.
TEST(LatencyHistogramTest, PercentilesWithinBucketPrecisionOfSortedSamples) {
  for (int bits : {5, 7}) {
    LatencyHistogram h(bits);
    std::mt19937_64 rng(7);
    std::lognormal_distribution<double> latency(std::log(20000.0), 2.0);
    std::vector<int64_t> samples;
    for (int i = 0; i < 100000; ++i) {
      samples.push_back(static_cast<int64_t>(latency(rng)));
      h.Record(samples.back());
    }
    std::sort(samples.begin(), samples.end());
    for (double q : {0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999}) {
      const int64_t exact = samples[static_cast<size_t>(std::ceil(q * samples.size())) - 1];
      EXPECT_NEAR(h.Percentile(q), exact, exact * std::ldexp(1.0, -bits) + 1)
          << "bits " << bits << " q " << q;
    }
    EXPECT_EQ(h.max(), samples.back());
    EXPECT_EQ(h.min(), samples.front());
  }
}

TEST(LatencyHistogramTest, MergeEqualsRecordingEverything) {
  LatencyHistogram a, b, all;
  for (int v = 0; v < 5000; v += 3) {
    (v % 2 == 0 ? a : b).Record(v * 37);
    all.Record(v * 37);
  }
  a.Merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_DOUBLE_EQ(a.mean(), all.mean());
  for (double q : {0.1, 0.5, 0.99}) EXPECT_EQ(a.Percentile(q), all.Percentile(q));
}

}  // namespace
}  // namespace gecd::loadgen
