#ifndef GECD_CPU_MATMUL_MATMUL_H_
#define GECD_CPU_MATMUL_MATMUL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

// A Linear y[rows, out] = x[rows, in] · Wᵀ (+ bias) through oneDNN, in one of two precisions:
//
// int8 (W8A8, engine.quantization int8):
//   1. at Create, each weight row o is quantized symmetrically to int8 with its own scale
//      sw[o] = max|W[o,:]| / 127 (a zero row gets scale 1);
//   2. at Apply, each activation row t likewise: sx[t] = max|x[t,:]| / 127, xq = round(x / sx),
//      rounding half away from zero;
//   3. acc = xq · Wqᵀ in int32 (exact), then y[t,o] = acc[t,o] * sx[t] * sw[o] + bias[o] in f32.
//
// bf16 (engine.cpu_matmul bf16, or auto on a CPU with AVX512-BF16 or AMX-BF16):
//   1. at Create, every weight is rounded to bf16 (nearest, ties to even: FloatToBf16 of
//      common/numerics.h, so a bf16 checkpoint's weights are kept exactly);
//   2. at Apply, every activation likewise;
//   3. acc = xbf · Wbfᵀ with the products and sums in f32, then y[t,o] = acc[t,o] + bias[o].
//
// Both share everything else: the weights are converted and reordered once, at Create, into
// the layout oneDNN's kernel for this CPU wants (the f32 copy is the caller's to drop); oneDNN
// needs no particular multiple of rows, in or out (its kernels pad internally). A oneDNN
// primitive is compiled for a fixed shape, so rows are rounded up to a row class (RowClass)
// and one primitive per class up to max_rows is created at Create (oneDNN's own primitive cache
// shares them between layers of one shape); Apply compiles nothing. Not thread-safe: one Apply
// at a time (they share one oneDNN stream); oneDNN runs each on its own threads
// (SetMatmulThreads).
namespace gecd::cpu_matmul {

enum class Precision { kInt8, kBf16 };

// "int8" or "bf16", for messages and logs.
inline const char* PrecisionName(Precision precision) {
  return precision == Precision::kInt8 ? "int8" : "bf16";
}

// The rows a call of `rows` rows computes (>= rows): exact classes would compile a primitive
// for every batch size; these are multiples of 8 up to 128, of 32 up to 512, then of 128.
// (Inline, like MatmulScratch, so that a build without oneDNN still compiles its users.)
inline int RowClass(int rows) {
  if (rows <= 128) return (rows + 7) / 8 * 8;
  if (rows <= 512) return (rows + 31) / 32 * 32;
  return (rows + 127) / 128 * 128;
}

// Apply's buffers besides its input and output, for either precision; sized once for the
// largest call. The kernel's operands are at most 2 bytes (bf16) and its sums 4 (int32, f32).
struct MatmulScratch {
  std::vector<std::byte> src;  // [RowClass(rows), in] int8 codes or bf16 values
  std::vector<float> x_scale;  // [rows] int8's per-token scales
  std::vector<std::byte> dst;  // [RowClass(rows), out] int32 or f32 sums

  void Reserve(int rows, int max_in, int max_out) {
    const size_t padded = static_cast<size_t>(RowClass(rows));
    if (src.size() < padded * max_in * 2) src.resize(padded * max_in * 2);
    if (x_scale.size() < static_cast<size_t>(rows)) x_scale.resize(rows);
    if (dst.size() < padded * max_out * 4) dst.resize(padded * max_out * 4);
  }
};

class Matmul {
 public:
  // weight: [out, in] row-major f32; bias: [out] or empty. Every weight must be finite
  // (InvalidArgument naming `name` and the row otherwise). max_rows: the largest Apply.
  // int8 needs VNNI in the kernels' ISA (cpu_isa.h): without it oneDNN multiplies u8 by s8
  // through saturating 16-bit pair sums, and the sums come out wrong (measured on an AVX2-only
  // AMD EPYC: -24,687 for an exact -34,104), so it is refused (FailedPrecondition).
  static absl::StatusOr<std::unique_ptr<Matmul>> Create(Precision precision,
                                                        const std::string& name,
                                                        std::span<const float> weight,
                                                        std::span<const float> bias, int out,
                                                        int in, int max_rows);
  ~Matmul();

  Precision precision() const { return precision_; }
  int in_features() const { return in_; }
  int out_features() const { return out_; }
  // int8's per-output-channel weight scales; empty in bf16.
  std::span<const float> weight_scales() const { return weight_scale_; }
  // The kernel oneDNN chose ("brg:avx512_core_vnni", "brg:avx512_core_bf16"), for logs.
  const std::string& kernel() const { return kernel_; }

  // y = x·Wᵀ + bias, or y += x·Wᵀ + bias when `accumulate`; 0 < rows <= max_rows. x and y
  // must not overlap; scratch reserved for `rows` rows of this layer's sizes. A row of x that
  // is not finite gives a row of y that is not finite, as the f32 product would.
  void Apply(const float* x, int rows, float* y, bool accumulate, MatmulScratch* scratch) const;

  // Apply in its three parts, for a caller that fuses its own work on a row between them (the
  // MLP: gate/up's output row, SiLU, and down's input row in one pass over data still in L1,
  // where Apply would write the row out and read it back twice). Apply is exactly:
  //   1. SetInputRow(t, x + t·in, scratch) for each t < rows: row t's operand (int8 codes and
  //      scale, or bf16), written to scratch;
  //   2. Multiply(rows, scratch): the kernel; the sums stay in scratch;
  //   3. OutputRow(t, scratch, y + t·out, accumulate) for each t < rows: row t of y.
  // OutputRow reads only row t's sums and scale, SetInputRow writes only row t's operand and
  // scale, so one scratch can carry a layer's output row t straight into the next layer's
  // input row t once the first layer's Multiply has run.
  void SetInputRow(int t, const float* x_row, MatmulScratch* scratch) const;
  // Step 1 for every row of x ([rows, in], row-major).
  void SetInputRows(const float* x, int rows, MatmulScratch* scratch) const;
  void Multiply(int rows, MatmulScratch* scratch) const;
  void OutputRow(int t, const MatmulScratch& scratch, float* y_row, bool accumulate) const;

 private:
  struct Kernels;  // oneDNN's objects
  Matmul() = default;
  // The primitives of every row class, for the weights `plain` ([out, in] in the precision's
  // operand type), and the weights reordered for them.
  absl::Status BuildKernels(const std::string& name, const void* plain);

  Precision precision_ = Precision::kInt8;
  int out_ = 0;
  int in_ = 0;
  int max_rows_ = 0;
  std::vector<float> weight_scale_;  // [out], int8 only
  std::vector<float> bias_;          // [out] or empty
  std::string kernel_;
  std::unique_ptr<Kernels> kernels_;
};

}  // namespace gecd::cpu_matmul

#endif  // GECD_CPU_MATMUL_MATMUL_H_
