#include "kernels/device_common.cuh"
#include "kernels/rope.h"

namespace gecd::kernels {
namespace {
using namespace detail;

__global__ void RopeKvWriteKernel(const uint16_t* __restrict__ qkv, const float* __restrict__ bias,
                                  const float* __restrict__ inv_freq, TokenMeta meta, RopeParams p,
                                  uint16_t* __restrict__ q_out, uint16_t* __restrict__ k_cache,
                                  uint16_t* __restrict__ v_cache) {
  const size_t t = blockIdx.x;
  const int hd = p.head_dim, half = hd / 2;
  const int q_width = p.heads * hd, kv_width = p.kv_heads * hd;
  const int stride = q_width + 2 * kv_width;
  const uint16_t* row = qkv + t * stride;
  const int position = meta.positions[t];
  const int block = meta.block_ids[meta.table_offsets[t] + position / p.block_size];
  const int slot = position % p.block_size;
  const size_t cache_row = (static_cast<size_t>(block) * p.block_size + slot) * kv_width;
  auto load = [&](int i) {
    float v = Bf16ToF(row[i]);
    if (bias != nullptr) v += bias[i];
    return v;
  };
  const int rotated_heads = p.heads + p.kv_heads;
  for (int idx = threadIdx.x; idx < rotated_heads * half; idx += blockDim.x) {
    const int h = idx / half, f = idx - h * half;
    const float angle = static_cast<float>(position) * inv_freq[f];
    float s, c;
    sincosf(angle, &s, &c);
    const int base = h * hd;
    const float x1 = load(base + f), x2 = load(base + f + half);
    const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
    if (h < p.heads) {
      q_out[t * q_width + base + f] = FToBf16(y1);
      q_out[t * q_width + base + f + half] = FToBf16(y2);
    } else {
      const int kb = base - q_width;
      k_cache[cache_row + kb + f] = FToBf16(y1);
      k_cache[cache_row + kb + f + half] = FToBf16(y2);
    }
  }
  for (int i = threadIdx.x; i < kv_width; i += blockDim.x) {
    v_cache[cache_row + i] = FToBf16(load(q_width + kv_width + i));
  }
}

}  // namespace

cudaError_t LaunchRopeKvWrite(const uint16_t* qkv, const float* bias, const float* inv_freq,
                              TokenMeta meta, int rows, RopeParams p, uint16_t* q_out,
                              uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (p.head_dim <= 0 || p.head_dim % 2 != 0 || p.heads <= 0 || p.kv_heads <= 0 ||
      p.block_size <= 0) {
    return cudaErrorInvalidValue;
  }
  RopeKvWriteKernel<<<rows, 128, 0, stream>>>(qkv, bias, inv_freq, meta, p, q_out, k_cache,
                                              v_cache);
  return cudaGetLastError();
}

}  // namespace gecd::kernels
