#ifndef GECD_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define GECD_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/numerics.h"
#include "gtest/gtest.h"
#include "kernels/cuda_util.h"

// Shared by the kernel tests: skip without a device, typed device buffers with poisoning
// (every output byte set to 0xFF first: NaN for f32 / bf16 / e4m3, -1 for int32, so an element
// a kernel never wrote fails the comparison), and error measures that print and reject NaN.
namespace gecd::kernels::testing {

// Skips without a device, unless GECD_REQUIRE_GPU is set in the environment (the GPU check
// sets it, so a broken driver fails loudly instead of skipping every test).
#define GECD_REQUIRE_GPU()                                                  \
  do {                                                                      \
    std::string gecd_why_;                                                  \
    if (!::gecd::kernels::HaveCudaDevice(&gecd_why_)) {                     \
      if (std::getenv("GECD_REQUIRE_GPU") != nullptr) {                     \
        FAIL() << "GECD_REQUIRE_GPU is set but CUDA reports " << gecd_why_; \
      }                                                                     \
      GTEST_SKIP() << "no CUDA device (" << gecd_why_ << ")";               \
    }                                                                       \
  } while (0)

#define GECD_ASSERT_CUDA(expr)                                                           \
  do {                                                                                   \
    const cudaError_t gecd_err_ = (expr);                                                \
    ASSERT_EQ(gecd_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(gecd_err_); \
  } while (0)

#define GECD_ASSERT_OK(expr)                                 \
  do {                                                       \
    const ::absl::Status gecd_st_ = (expr);                  \
    ASSERT_TRUE(gecd_st_.ok()) << #expr << ": " << gecd_st_; \
  } while (0)

// A device array of T that frees itself; Upload/Download are synchronous.
template <typename T>
class Dev {
 public:
  explicit Dev(size_t n = 0) { Resize(n); }
  void Resize(size_t n) {
    n_ = n;
    const absl::Status st = buf_.Allocate(std::max<size_t>(n, 1) * sizeof(T));
    EXPECT_TRUE(st.ok()) << st;
  }
  explicit Dev(const std::vector<T>& host) : Dev(host.size()) { Upload(host); }
  void Upload(const std::vector<T>& host) {
    EXPECT_EQ(cudaMemcpy(buf_.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), buf_.get(), n_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
  void Poison() { EXPECT_EQ(cudaMemset(buf_.get(), 0xFF, n_ * sizeof(T)), cudaSuccess); }
  T* get() const { return buf_.as<T>(); }
  size_t size() const { return n_; }

 private:
  DeviceBuffer buf_;
  size_t n_ = 0;
};

inline std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}
inline std::vector<float> FromBf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(v[i]);
  return out;
}
// Rounds through bf16, so a reference sees exactly the device's bf16 inputs.
inline std::vector<float> RoundBf16(const std::vector<float>& v) { return FromBf16(ToBf16(v)); }

struct ErrorStats {
  double rel_norm = 0.0;  // ||got - ref|| / ||ref||
  double max_abs = 0.0;
  size_t nan_count = 0;  // NaN / inf in `got` (e.g. an element never written)
  size_t worst_index = 0;
};

// Compares and prints; `what` names the case in the output.
inline ErrorStats Compare(const std::string& what, const std::vector<float>& got,
                          const std::vector<double>& ref) {
  ErrorStats s;
  EXPECT_EQ(got.size(), ref.size()) << what;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    if (!std::isfinite(got[i])) {
      ++s.nan_count;
      continue;
    }
    const double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    if (std::abs(d) > s.max_abs) {
      s.max_abs = std::abs(d);
      s.worst_index = i;
    }
  }
  s.rel_norm = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  std::printf("[ %s ] n=%zu rel_norm_err=%.3g max_abs_err=%.3g (at %zu) non_finite=%zu\n",
              what.c_str(), got.size(), s.rel_norm, s.max_abs, s.worst_index, s.nan_count);
  return s;
}

inline ErrorStats Compare(const std::string& what, const std::vector<float>& got,
                          const std::vector<float>& ref) {
  return Compare(what, got, std::vector<double>(ref.begin(), ref.end()));
}

// The standard check: no non-finite values, relative norm error within `bound`.
#define GECD_EXPECT_CLOSE(stats, bound)                                          \
  do {                                                                           \
    EXPECT_EQ((stats).nan_count, 0u) << "non-finite outputs (unwritten or NaN)"; \
    EXPECT_LE((stats).rel_norm, (bound));                                        \
  } while (0)

}  // namespace gecd::kernels::testing

#endif  // GECD_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

namespace gecd::kernels::testing {

// Compares device e4m3 codes + per-row scales with a host quantization of the same values.
// f32 rounding differences between device and host math can move a value across an e4m3
// rounding boundary, so a few codes may differ by one step; anything else fails.
inline void ExpectFp8Close(const std::string& what, const std::vector<uint8_t>& codes,
                           const std::vector<float>& scales, const std::vector<uint8_t>& ref_codes,
                           const std::vector<float>& ref_scales) {
  ASSERT_EQ(codes.size(), ref_codes.size()) << what;
  ASSERT_EQ(scales.size(), ref_scales.size()) << what;
  double worst_scale = 0.0;
  for (size_t r = 0; r < scales.size(); ++r) {
    ASSERT_TRUE(std::isfinite(scales[r])) << what << " scale " << r << " not written / NaN";
    worst_scale = std::max(
        worst_scale, std::abs(static_cast<double>(scales[r]) - ref_scales[r]) / ref_scales[r]);
  }
  size_t mismatches = 0, far = 0, nan = 0;
  for (size_t i = 0; i < codes.size(); ++i) {
    if ((codes[i] & 0x7F) == 0x7F) {
      ++nan;
      continue;
    }
    if (codes[i] == ref_codes[i]) continue;
    ++mismatches;
    const float a = E4m3ToFloat(codes[i]), b = E4m3ToFloat(ref_codes[i]);
    if (std::abs(a - b) > 0.13f * std::max(std::abs(a), std::abs(b)) + 1e-2f) ++far;
  }
  std::printf(
      "[ %s ] n=%zu scale_rel_err=%.3g code_mismatches=%zu (more than one step: %zu) "
      "nan=%zu\n",
      what.c_str(), codes.size(), worst_scale, mismatches, far, nan);
  EXPECT_LE(worst_scale, 1e-5) << what;
  EXPECT_EQ(nan, 0u) << what << ": NaN codes (unwritten?)";
  EXPECT_EQ(far, 0u) << what;
  EXPECT_LE(mismatches, codes.size() / 500 + 1) << what;
}

}  // namespace gecd::kernels::testing

#include <algorithm>
#include <numeric>

namespace gecd::kernels::testing {

// A step over a paged cache: sequences (start position, new tokens) with shuffled, distinct
// block ids, flattened into the per-token metadata the kernels read.
struct PagedStep {
  int block_size = 16;
  int num_blocks = 0;
  std::vector<int32_t> positions;      // per token
  std::vector<int32_t> table_offsets;  // per token
  std::vector<int32_t> block_ids;
  std::vector<int> token_seq;  // per token: its sequence

  // seqs: {start_position, num_tokens}.
  static PagedStep Make(const std::vector<std::pair<int, int>>& seqs, int block_size,
                        uint64_t seed) {
    PagedStep s;
    s.block_size = block_size;
    int needed = 0;
    for (auto [start, n] : seqs) needed += (start + n + block_size - 1) / block_size;
    s.num_blocks = needed + 3;  // spare blocks stay untouched
    std::vector<int32_t> ids(s.num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(ids.begin(), ids.end(), rng);
    int next = 0;
    for (size_t q = 0; q < seqs.size(); ++q) {
      const auto [start, n] = seqs[q];
      const int offset = static_cast<int>(s.block_ids.size());
      const int blocks = (start + n + block_size - 1) / block_size;
      for (int b = 0; b < blocks; ++b) s.block_ids.push_back(ids[next++]);
      for (int i = 0; i < n; ++i) {
        s.positions.push_back(start + i);
        s.table_offsets.push_back(offset);
        s.token_seq.push_back(static_cast<int>(q));
      }
    }
    return s;
  }
  int rows() const { return static_cast<int>(positions.size()); }
  // Element index of (block table entry of token t's sequence at position p, kv head h, d).
  size_t CacheIndex(int t, int p, int h, int d, int kv_heads, int head_dim) const {
    const int block = block_ids[table_offsets[t] + p / block_size];
    return ((static_cast<size_t>(block) * block_size + p % block_size) * kv_heads + h) * head_dim +
           d;
  }
};

}  // namespace gecd::kernels::testing
