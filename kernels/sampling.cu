#include <cfloat>

#include "kernels/device_common.cuh"
#include "kernels/sampling.h"

namespace gecd::kernels {
namespace {

__device__ __forceinline__ bool Better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    ArgmaxKernel(const float* __restrict__ logits, int vocab, int32_t* __restrict__ out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  float best = -FLT_MAX;
  int best_i = vocab;  // "none yet": loses every tie against a real index
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    // Strided scan visits increasing ids, so strict > keeps the lowest id of a tie; NaN fails.
    if (v > best || (v == best && i < best_i)) {
      best = v;
      best_i = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (Better(ov, oi, best, best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    best = lane < kThreads / 32 ? sv[lane] : -FLT_MAX;
    best_i = lane < kThreads / 32 ? si[lane] : vocab;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (Better(ov, oi, best, best_i)) {
        best = ov;
        best_i = oi;
      }
    }
    // A row of only NaN / -inf keeps vocab: report 0 rather than an invalid id.
    if (lane == 0) out[blockIdx.x] = best_i < vocab ? best_i : 0;
  }
}

}  // namespace

cudaError_t LaunchArgmax(const float* logits, int rows, int vocab, int32_t* out,
                         cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  constexpr int kThreads = 1024;
  ArgmaxKernel<kThreads><<<rows, kThreads, 0, stream>>>(logits, vocab, out);
  return cudaGetLastError();
}

}  // namespace gecd::kernels
