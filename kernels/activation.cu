#include "kernels/activation.h"
#include "kernels/device_common.cuh"

namespace gecd::kernels {
namespace {
using namespace detail;

__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    SwiGluKernel(const uint16_t* __restrict__ gate_up, int inter, uint16_t* __restrict__ act_bf16,
                 uint8_t* __restrict__ act_fp8, float* __restrict__ act_scale) {
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  const uint16_t* g = gate_up + t * 2 * inter;
  const uint16_t* u = g + inter;
  float amax = 0.0f;
  for (int i = threadIdx.x; i < inter; i += kThreads) {
    const float a = Silu(Bf16ToF(g[i])) * Bf16ToF(u[i]);
    if (act_bf16 != nullptr) act_bf16[t * inter + i] = FToBf16(a);
    amax = fmaxf(amax, fabsf(a));
  }
  if (act_fp8 == nullptr) return;
  amax = BlockMax(amax, red);
  const float scale = RowScaleFromAmax(amax);
  if (threadIdx.x == 0) act_scale[t] = scale;
  for (int i = threadIdx.x; i < inter; i += kThreads) {
    const float a = Silu(Bf16ToF(g[i])) * Bf16ToF(u[i]);
    act_fp8[t * inter + i] = FToE4m3(a / scale);
  }
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    QuantizeRowsKernel(const uint16_t* __restrict__ x, int cols, uint8_t* __restrict__ codes,
                       float* __restrict__ scales) {
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  const uint16_t* row = x + t * cols;
  float amax = 0.0f;
  for (int i = threadIdx.x; i < cols; i += kThreads) amax = fmaxf(amax, fabsf(Bf16ToF(row[i])));
  amax = BlockMax(amax, red);
  const float scale = RowScaleFromAmax(amax);
  if (threadIdx.x == 0) scales[t] = scale;
  for (int i = threadIdx.x; i < cols; i += kThreads) {
    codes[t * cols + i] = FToE4m3(Bf16ToF(row[i]) / scale);
  }
}

// |x| of non-negative floats orders like its bit pattern, so atomicMax on the bits works.
__global__ void AbsMaxKernel(const uint16_t* __restrict__ x, size_t n, float* amax) {
  __shared__ float red[32];
  float m = 0.0f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    m = fmaxf(m, fabsf(Bf16ToF(x[i])));
  }
  m = BlockMax(m, red);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(m));
}

__global__ void QuantizeTensorKernel(const uint16_t* __restrict__ x, size_t n,
                                     uint8_t* __restrict__ codes, float* __restrict__ scale_out,
                                     const float* __restrict__ amax) {
  const float scale = RowScaleFromAmax(*amax);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_out = scale;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    codes[i] = FToE4m3(Bf16ToF(x[i]) / scale);
  }
}

__global__ void ScaleRowsColsKernel(const float* __restrict__ acc,
                                    const float* __restrict__ x_scale,
                                    const float* __restrict__ w_scale, int rows, int out,
                                    uint16_t* __restrict__ y) {
  const size_t n = static_cast<size_t>(rows) * out;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = i / out;
    const size_t o = i - t * out;
    y[i] = FToBf16((acc[i] * x_scale[t]) * w_scale[o]);
  }
}

int GridFor(size_t n, int threads) {
  size_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535u * 8u) blocks = 65535u * 8u;
  return static_cast<int>(blocks < 1 ? 1 : blocks);
}

}  // namespace

cudaError_t LaunchSwiGlu(const uint16_t* gate_up, int rows, int inter, uint16_t* act_bf16,
                         uint8_t* act_fp8, float* act_scale, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  SwiGluKernel<kThreads>
      <<<rows, kThreads, 0, stream>>>(gate_up, inter, act_bf16, act_fp8, act_scale);
  return cudaGetLastError();
}

cudaError_t LaunchQuantizeRows(const uint16_t* x, int rows, int cols, uint8_t* codes, float* scales,
                               cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  QuantizeRowsKernel<kThreads><<<rows, kThreads, 0, stream>>>(x, cols, codes, scales);
  return cudaGetLastError();
}

cudaError_t LaunchQuantizeTensor(const uint16_t* x, int rows, int cols, uint8_t* codes,
                                 float* scale, float* amax, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const size_t n = static_cast<size_t>(rows) * cols;
  cudaError_t err = cudaMemsetAsync(amax, 0, sizeof(float), stream);
  if (err != cudaSuccess) return err;
  const int grid = GridFor(n, 256) > 1024 ? 1024 : GridFor(n, 256);
  AbsMaxKernel<<<grid, 256, 0, stream>>>(x, n, amax);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  QuantizeTensorKernel<<<GridFor(n, 256), 256, 0, stream>>>(x, n, codes, scale, amax);
  return cudaGetLastError();
}

cudaError_t LaunchScaleRowsCols(const float* acc, const float* x_scale, const float* w_scale,
                                int rows, int out, uint16_t* y, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const size_t n = static_cast<size_t>(rows) * out;
  ScaleRowsColsKernel<<<GridFor(n, 256), 256, 0, stream>>>(acc, x_scale, w_scale, rows, out, y);
  return cudaGetLastError();
}

}  // namespace gecd::kernels
