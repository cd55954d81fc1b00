#ifndef GECD_KERNELS_NORM_H_
#define GECD_KERNELS_NORM_H_

#include <cuda_runtime.h>

#include <cstdint>

// Fused residual add + RMSNorm (+ per-token FP8 quantization). The residual stream x is f32
// [*, hidden]; HF's RMSNorm: h = weight * (x * rsqrt(mean(x²) + eps)), all in f32.
namespace gecd::kernels {

// For each output row r: src = row_map ? row_map[r] : r;
//   if delta: x[src] += delta[src] (bf16, written back into x);
//   h = RMSNorm(x[src]) * weight;
//   out_bf16[r] = bf16(h) if out_bf16; out_fp8[r], out_scale[r] = QuantizeRow(h) if out_fp8
//   (quantized from the f32 h, common/numerics.h rule).
cudaError_t LaunchAddRmsNorm(float* x, const uint16_t* delta, const int32_t* row_map,
                             const float* weight, int rows, int hidden, float eps,
                             uint16_t* out_bf16, uint8_t* out_fp8, float* out_scale,
                             cudaStream_t stream);

// x[r] += delta[r] for rows [0, rows) (no norm); used where no norm follows.
cudaError_t LaunchAddBf16(float* x, const uint16_t* delta, int rows, int hidden,
                          cudaStream_t stream);

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_NORM_H_
