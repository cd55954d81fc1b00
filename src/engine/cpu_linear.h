#ifndef GECD_ENGINE_CPU_LINEAR_H_
#define GECD_ENGINE_CPU_LINEAR_H_

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cpu_matmul/int8_matmul.h"
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
// ToInt8 turns a layer into an int8 W8A8 one (cpu_matmul/int8_matmul.h, engine.quantization
// int8): its f32 weights (an FP8 layer's dequantized: e4m3 value times scale) are quantized per
// output channel and the f32 copy is dropped.
namespace gecd::engine {

// Buffers a Linear needs besides its input and output; sized once for the largest call.
struct LinearScratch {
  std::vector<float> x_q;      // [rows, in] quantized activations
  std::vector<float> x_scale;  // [rows]
  std::vector<float> acc;      // [rows, out] for FP8 layers that accumulate into y
  cpu_matmul::Int8Scratch int8;

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
  bool is_int8() const { return int8_ != nullptr; }
  // "brg:avx512_core_vnni": the oneDNN kernel of an int8 layer; "" otherwise.
  std::string int8_kernel() const;

  // Quantizes this layer to int8 for calls of up to `max_rows` rows; `name` names it in
  // errors. FailedPrecondition in a build without oneDNN.
  absl::Status ToInt8(const std::string& name, int max_rows);

  // y = x·Wᵀ + bias, or y += x·Wᵀ + bias when `accumulate`. x and y must not overlap; scratch
  // must have been reserved for at least `rows` rows of this layer's sizes.
  void Apply(const float* x, int rows, float* y, bool accumulate, LinearScratch* scratch) const;

 private:
  int out_ = 0;
  int in_ = 0;
  std::vector<float> weight_;        // [out, in]; e4m3 values for FP8 layers
  std::vector<float> weight_scale_;  // [out], FP8 only
  std::vector<float> bias_;          // [out] or empty
  // Set by ToInt8, which empties weight_ and weight_scale_; shared so CpuLinear stays copyable.
  std::shared_ptr<const cpu_matmul::Int8Matmul> int8_;
};

}  // namespace gecd::engine

#endif  // GECD_ENGINE_CPU_LINEAR_H_
