#include <cfloat>

#include "kernels/attention.h"
#include "kernels/device_common.cuh"

namespace gecd::kernels {
namespace {
using namespace detail;

constexpr int kThreads = 128;
constexpr int kChunk = kThreads;  // keys per chunk: one per thread for the scores

// Dynamic shared memory: q[group][hd], acc[group][hd], s[group][kChunk], m/l/alpha[group].
__global__ void __launch_bounds__(kThreads)
    PagedAttentionKernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k_cache,
                         const uint16_t* __restrict__ v_cache, TokenMeta meta, AttentionParams p,
                         uint16_t* __restrict__ out) {
  extern __shared__ float smem[];
  const int group = p.heads / p.kv_heads;
  const int hd = p.head_dim;
  float* q_s = smem;
  float* acc = q_s + group * hd;
  float* s = acc + group * hd;
  float* m_s = s + group * kChunk;
  float* l_s = m_s + group;
  float* alpha_s = l_s + group;

  const size_t t = blockIdx.x;
  const int g = blockIdx.y;
  const int q_width = p.heads * hd, kv_width = p.kv_heads * hd;
  const int context = meta.positions[t] + 1;
  const int32_t* table = meta.block_ids + meta.table_offsets[t];
  const uint16_t* q_row = q + t * q_width + static_cast<size_t>(g) * group * hd;
  for (int i = threadIdx.x; i < group * hd; i += kThreads) {
    q_s[i] = Bf16ToF(q_row[i]);
    acc[i] = 0.0f;
  }
  for (int h = threadIdx.x; h < group; h += kThreads) {
    m_s[h] = -FLT_MAX;
    l_s[h] = 0.0f;
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int kWarps = kThreads / 32;

  for (int c0 = 0; c0 < context; c0 += kChunk) {
    const int n = min(kChunk, context - c0);
    if (threadIdx.x < n) {
      const int j = c0 + threadIdx.x;
      const size_t row =
          (static_cast<size_t>(table[j / p.block_size]) * p.block_size + j % p.block_size) *
              kv_width +
          static_cast<size_t>(g) * hd;
      const uint16_t* k = k_cache + row;
      for (int h = 0; h < group; ++h) {
        const float* qh = q_s + h * hd;
        float dot = 0.0f;
        if ((hd & 7) == 0) {
          for (int d = 0; d < hd; d += 8) {
            const uint4 raw = *reinterpret_cast<const uint4*>(k + d);
            const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              dot += qh[d + 2 * e] * __uint_as_float(w[e] << 16);
              dot += qh[d + 2 * e + 1] * __uint_as_float(w[e] & 0xffff0000u);
            }
          }
        } else {
          for (int d = 0; d < hd; ++d) dot += qh[d] * Bf16ToF(k[d]);
        }
        s[h * kChunk + threadIdx.x] = dot * p.scale;
      }
    }
    __syncthreads();
    for (int h = warp; h < group; h += kWarps) {
      float mx = -FLT_MAX;
      for (int i = lane; i < n; i += 32) mx = fmaxf(mx, s[h * kChunk + i]);
      mx = WarpMax(mx);
      const float m_new = fmaxf(m_s[h], mx);
      float sum = 0.0f;
      for (int i = lane; i < n; i += 32) {
        const float e = expf(s[h * kChunk + i] - m_new);
        s[h * kChunk + i] = e;
        sum += e;
      }
      sum = WarpSum(sum);
      if (lane == 0) {
        const float alpha = expf(m_s[h] - m_new);  // 0 on the first chunk
        alpha_s[h] = alpha;
        l_s[h] = l_s[h] * alpha + sum;
        m_s[h] = m_new;
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < group * hd; idx += kThreads) {
      const int h = idx / hd, d = idx - h * hd;
      float a = acc[idx] * alpha_s[h];
      const float* ph = s + h * kChunk;
      for (int i = 0; i < n; ++i) {
        const int j = c0 + i;
        const size_t row =
            (static_cast<size_t>(table[j / p.block_size]) * p.block_size + j % p.block_size) *
                kv_width +
            static_cast<size_t>(g) * hd;
        a += ph[i] * Bf16ToF(v_cache[row + d]);
      }
      acc[idx] = a;
    }
    __syncthreads();
  }
  uint16_t* o = out + t * q_width + static_cast<size_t>(g) * group * hd;
  for (int idx = threadIdx.x; idx < group * hd; idx += kThreads) {
    const int h = idx / hd;
    o[idx] = FToBf16(acc[idx] / l_s[h]);
  }
}

}  // namespace

cudaError_t LaunchPagedAttention(const uint16_t* q, const uint16_t* k_cache,
                                 const uint16_t* v_cache, TokenMeta meta, int rows,
                                 AttentionParams p, uint16_t* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (p.heads <= 0 || p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.head_dim <= 0 ||
      p.head_dim > 256 || p.block_size <= 0) {
    return cudaErrorInvalidValue;
  }
  const int group = p.heads / p.kv_heads;
  if (group * p.head_dim > 4096) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * (2 * group * p.head_dim + group * kChunk + 3 * group);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;
  const dim3 grid(rows, p.kv_heads);
  PagedAttentionKernel<<<grid, kThreads, smem, stream>>>(q, k_cache, v_cache, meta, p, out);
  return cudaGetLastError();
}

}  // namespace gecd::kernels
