#ifndef GECD_CPU_MATMUL_INT8_MATMUL_H_
#define GECD_CPU_MATMUL_INT8_MATMUL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

// A Linear y[rows, out] = x[rows, in] · Wᵀ (+ bias) in int8 (W8A8) through oneDNN:
//   1. at Create, each weight row o is quantized symmetrically to int8 with its own scale
//      sw[o] = max|W[o,:]| / 127 (a zero row gets scale 1) and reordered once into the layout
//      oneDNN's kernel for this CPU wants;
//   2. at Apply, each activation row t likewise: sx[t] = max|x[t,:]| / 127, xq = round(x / sx),
//      rounding half away from zero;
//   3. acc = xq · Wqᵀ in int32 (exact), then y[t,o] = acc[t,o] * sx[t] * sw[o] + bias[o] in f32.
// oneDNN needs no particular multiple of rows, in or out: its kernels pad internally.
//
// A oneDNN primitive is compiled for a fixed shape, so rows are rounded up to a row class
// (RowClass) and one primitive per class up to max_rows is created at Create (oneDNN's own
// primitive cache shares them between layers of one shape); Apply compiles nothing. Not
// thread-safe: one Apply at a time (they share one oneDNN stream); oneDNN runs each on its own
// threads (SetMatmulThreads).
namespace gecd::cpu_matmul {

// The rows a call of `rows` rows computes (>= rows): exact classes would compile a primitive
// for every batch size; these are multiples of 8 up to 128, of 32 up to 512, then of 128.
// (Inline, like Int8Scratch, so that a build without oneDNN still compiles its users.)
inline int RowClass(int rows) {
  if (rows <= 128) return (rows + 7) / 8 * 8;
  if (rows <= 512) return (rows + 31) / 32 * 32;
  return (rows + 127) / 128 * 128;
}

// Apply's buffers besides its input and output; sized once for the largest call.
struct Int8Scratch {
  std::vector<int8_t> x_q;     // [RowClass(rows), in]
  std::vector<float> x_scale;  // [rows]
  std::vector<int32_t> acc;    // [RowClass(rows), out]

  void Reserve(int rows, int max_in, int max_out) {
    const size_t padded = static_cast<size_t>(RowClass(rows));
    if (x_q.size() < padded * max_in) x_q.resize(padded * max_in);
    if (x_scale.size() < static_cast<size_t>(rows)) x_scale.resize(rows);
    if (acc.size() < padded * max_out) acc.resize(padded * max_out);
  }
};

class Int8Matmul {
 public:
  // weight: [out, in] row-major f32; bias: [out] or empty. Every weight must be finite
  // (InvalidArgument naming `name` and the row otherwise). max_rows: the largest Apply.
  static absl::StatusOr<std::unique_ptr<Int8Matmul>> Create(const std::string& name,
                                                            std::span<const float> weight,
                                                            std::span<const float> bias, int out,
                                                            int in, int max_rows);
  ~Int8Matmul();

  int in_features() const { return in_; }
  int out_features() const { return out_; }
  std::span<const float> weight_scales() const { return weight_scale_; }
  // The kernel oneDNN chose ("brg:avx512_core_vnni"), for logs.
  const std::string& kernel() const { return kernel_; }

  // y = x·Wᵀ + bias, or y += x·Wᵀ + bias when `accumulate`; 0 < rows <= max_rows. x and y
  // must not overlap; scratch reserved for `rows` rows of this layer's sizes. A row of x that
  // is not finite gives a row of y that is not finite, as the f32 product would.
  void Apply(const float* x, int rows, float* y, bool accumulate, Int8Scratch* scratch) const;

 private:
  struct Kernels;  // oneDNN's objects
  Int8Matmul() = default;

  int out_ = 0;
  int in_ = 0;
  int max_rows_ = 0;
  std::vector<float> weight_scale_;  // [out]
  std::vector<float> bias_;          // [out] or empty
  std::string kernel_;
  std::unique_ptr<Kernels> kernels_;
};

}  // namespace gecd::cpu_matmul

#endif  // GECD_CPU_MATMUL_INT8_MATMUL_H_
