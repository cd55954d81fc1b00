#ifndef GECD_KERNELS_ACTIVATION_H_
#define GECD_KERNELS_ACTIVATION_H_

#include <cuda_runtime.h>

#include <cstdint>

// Element-wise kernels around the GEMMs. bf16 is passed as uint16_t, e4m3 as uint8_t codes.
// FP8 quantization follows common/numerics.h: per row, scale = max|x| / 448 (kMinFp8Scale for
// an all-zero row), code = e4m3(x / scale) rounded to nearest even, saturating.
// Every Launch* returns the launch error (cudaGetLastError), cudaSuccess when rows == 0.
namespace gecd::kernels {

// act[t, i] = silu(g) * u with g = gate_up[t, i], u = gate_up[t, inter + i], computed in f32.
// Writes act_bf16 [rows, inter] when non-null, and act_fp8 [rows, inter] + act_scale [rows]
// (quantized from the f32 values) when non-null.
cudaError_t LaunchSwiGlu(const uint16_t* gate_up, int rows, int inter, uint16_t* act_bf16,
                         uint8_t* act_fp8, float* act_scale, cudaStream_t stream);

// Per-row (per-token) quantization of a bf16 matrix [rows, cols].
cudaError_t LaunchQuantizeRows(const uint16_t* x, int rows, int cols, uint8_t* codes, float* scales,
                               cudaStream_t stream);

// Per-tensor quantization: scale[0] = max|x| / 448 over the whole matrix, codes = e4m3(x /
// scale). `amax` is one float of device scratch.
cudaError_t LaunchQuantizeTensor(const uint16_t* x, int rows, int cols, uint8_t* codes,
                                 float* scale, float* amax, cudaStream_t stream);

// The FP8 fallback's epilogue: y[t, o] = bf16((acc[t, o] * x_scale[t]) * w_scale[o]).
cudaError_t LaunchScaleRowsCols(const float* acc, const float* x_scale, const float* w_scale,
                                int rows, int out, uint16_t* y, cudaStream_t stream);

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_ACTIVATION_H_
