#include "kernels/device_common.cuh"
#include "kernels/norm.h"

namespace gecd::kernels {
namespace {
using namespace detail;

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    AddRmsNormKernel(float* __restrict__ x, const uint16_t* __restrict__ delta,
                     const int32_t* __restrict__ row_map, const float* __restrict__ weight,
                     int hidden, float eps, uint16_t* __restrict__ out_bf16,
                     uint8_t* __restrict__ out_fp8, float* __restrict__ out_scale) {
  __shared__ float red[32];
  const size_t r = blockIdx.x;
  const size_t src = row_map != nullptr ? static_cast<size_t>(row_map[r]) : r;
  float* xr = x + src * hidden;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += kThreads) {
    float v = xr[i];
    if (delta != nullptr) {
      v += Bf16ToF(delta[src * hidden + i]);
      xr[i] = v;  // each element is read back only by the thread that wrote it
    }
    sum += v * v;
  }
  sum = BlockSum(sum, red);
  const float inv = 1.0f / sqrtf(sum / static_cast<float>(hidden) + eps);
  float amax = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += kThreads) {
    const float h = weight[i] * (xr[i] * inv);
    if (out_bf16 != nullptr) out_bf16[r * hidden + i] = FToBf16(h);
    amax = fmaxf(amax, fabsf(h));
  }
  if (out_fp8 == nullptr) return;
  amax = BlockMax(amax, red);
  const float scale = RowScaleFromAmax(amax);
  if (threadIdx.x == 0) out_scale[r] = scale;
  for (int i = threadIdx.x; i < hidden; i += kThreads) {
    const float h = weight[i] * (xr[i] * inv);
    out_fp8[r * hidden + i] = FToE4m3(h / scale);
  }
}

__global__ void AddBf16Kernel(float* __restrict__ x, const uint16_t* __restrict__ delta, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] += Bf16ToF(delta[i]);
  }
}

}  // namespace

cudaError_t LaunchAddRmsNorm(float* x, const uint16_t* delta, const int32_t* row_map,
                             const float* weight, int rows, int hidden, float eps,
                             uint16_t* out_bf16, uint8_t* out_fp8, float* out_scale,
                             cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  AddRmsNormKernel<kThreads><<<rows, kThreads, 0, stream>>>(x, delta, row_map, weight, hidden, eps,
                                                            out_bf16, out_fp8, out_scale);
  return cudaGetLastError();
}

cudaError_t LaunchAddBf16(float* x, const uint16_t* delta, int rows, int hidden,
                          cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const size_t n = static_cast<size_t>(rows) * hidden;
  size_t grid = (n + 255) / 256;
  if (grid > 4096) grid = 4096;
  AddBf16Kernel<<<static_cast<int>(grid), 256, 0, stream>>>(x, delta, n);
  return cudaGetLastError();
}

}  // namespace gecd::kernels
