#ifndef GECD_ENGINE_CPU_LINEAR_H_
#define GECD_ENGINE_CPU_LINEAR_H_

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cpu_matmul/matmul.h"
#include "model/checkpoint.h"

// A Linear layer on the CPU: y[rows, out] = x[rows, in] · Wᵀ (+ bias), one cblas_sgemm per
// call. Several layers reading the same input (q/k/v, gate/up) are fused into one by
// concatenating their weights along the output dimension.
//
// FP8 layers (F8_E4M3 weight + per-output-channel weight_scale) emulate exactly what the GPU's
// FP8 GEMM computes, so this is the oracle for those kernels:
//   1. each activation row is quantized per token with QuantizeRowsE4m3 (common/numerics.h):
//      sx[t] = max|x[t,:]| / 448, xq = e4m3(x / sx) as exact f32 values;
//   2. acc = xq · Wqᵀ with Wq the weight's e4m3 values as exact f32, so every product is exact
//      and only the f32 accumulation order differs from the GPU;
//   3. y[t,o] = (acc[t,o] * sx[t]) * sw[o], then + bias[o].
// An FP8 checkpoint's scales must be finite and positive (gecd quantize never writes others).
//
// ToOneDnn hands a layer to oneDNN (cpu_matmul/matmul.h) and drops its f32 copy:
//   - int8 W8A8 (engine.quantization int8): its f32 weights (an FP8 layer's dequantized: e4m3
//     value times scale) are quantized per output channel;
//   - bf16 (engine.cpu_matmul): its weights rounded to bf16, f32 sums. An FP8 layer stays as it
//     is (the FP8 emulation above is the CUDA kernels' oracle; ToOneDnn leaves it alone).
namespace gecd::engine {

// Buffers a Linear needs besides its input and output; sized once for the largest call.
struct LinearScratch {
  std::vector<float> x_q;      // [rows, in] quantized activations
  std::vector<float> x_scale;  // [rows]
  std::vector<float> acc;      // [rows, out] for FP8 layers that accumulate into y
  cpu_matmul::MatmulScratch onednn;

  void Reserve(int rows, int max_in, int max_out);
};

class CpuLinear {
 public:
  // Converts (bf16/f16 -> f32, e4m3 codes -> exact f32 values) and concatenates `parts` along
  // the output dimension. All parts must share the input size and be all FP8 or all not.
  static absl::StatusOr<CpuLinear> Fuse(std::span<const model::LinearWeight> parts);
  // A plain f32 layer from a row-major [out, in] matrix (e.g. tied embeddings as lm_head).
  static CpuLinear Dense(std::vector<float> weight, int out_features, int in_features);

  int in_features() const { return in_; }
  int out_features() const { return out_; }
  bool is_fp8() const { return !weight_scale_.empty(); }
  // Whether oneDNN runs this layer (ToOneDnn).
  bool on_onednn() const { return onednn_ != nullptr; }
  // The oneDNN matmul running this layer, for callers that fuse work into its row loops
  // (Matmul::SetInputRow/Multiply/OutputRow); null when OpenBLAS or the FP8 emulation runs it.
  const cpu_matmul::Matmul* onednn() const { return onednn_.get(); }
  // "brg:avx512_core_vnni": the oneDNN kernel of a layer oneDNN runs; "" otherwise.
  std::string onednn_kernel() const;

  // Hands this layer to oneDNN in `precision` for calls of up to `max_rows` rows (bf16 leaves
  // an FP8 layer as it is); `name` names it in errors. FailedPrecondition in a build without
  // oneDNN.
  absl::Status ToOneDnn(cpu_matmul::Precision precision, const std::string& name, int max_rows);

  // y = x·Wᵀ + bias, or y += x·Wᵀ + bias when `accumulate`. x and y must not overlap; scratch
  // must have been reserved for at least `rows` rows of this layer's sizes.
  void Apply(const float* x, int rows, float* y, bool accumulate, LinearScratch* scratch) const;

 private:
  int out_ = 0;
  int in_ = 0;
  std::vector<float> weight_;        // [out, in]; e4m3 values for FP8 layers
  std::vector<float> weight_scale_;  // [out], FP8 only
  std::vector<float> bias_;          // [out] or empty
  // Set by ToOneDnn, which empties weight_ and weight_scale_; shared so CpuLinear stays
  // copyable.
  std::shared_ptr<const cpu_matmul::Matmul> onednn_;
};

}  // namespace gecd::engine

#endif  // GECD_ENGINE_CPU_LINEAR_H_
