#ifndef GECD_KERNELS_DEVICE_COMMON_CUH_
#define GECD_KERNELS_DEVICE_COMMON_CUH_

// Device helpers shared by the .cu files: bf16 / e4m3 conversions matching common/numerics.h
// (round to nearest even; e4m3 saturating at ±448) and block reductions.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace gecd::kernels::detail {

constexpr float kFp8Max = 448.0f;
constexpr float kMinFp8Scale = 1.0f / (448.0f * 512.0f);  // = common/numerics.h

__device__ __forceinline__ float Bf16ToF(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}
__device__ __forceinline__ uint16_t FToBf16(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
__device__ __forceinline__ uint8_t FToE4m3(float f) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float RowScaleFromAmax(float amax) {
  return amax > 0.0f ? amax / kFp8Max : kMinFp8Scale;
}

// Sum / max over the block; every thread gets the result. `shared` holds >= 32 floats.
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float BlockSum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = WarpSum(v);
  __syncthreads();  // shared may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < warps ? shared[lane] : 0.0f;
  return WarpSum(r);
}
__device__ __forceinline__ float BlockMax(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < warps ? shared[lane] : 0.0f;
  return WarpMax(r);
}

}  // namespace gecd::kernels::detail

#endif  // GECD_KERNELS_DEVICE_COMMON_CUH_
