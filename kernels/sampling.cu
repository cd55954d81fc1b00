#include <cfloat>
#include <climits>

#include "kernels/device_common.cuh"
#include "kernels/sampling.h"

namespace gecd::kernels {
namespace {

// Reduces each lane's (value, index) over the warp to the pair whose value comes first under
// `before` (a strict order), the lowest index among equal values; every lane gets the result.
// An unordered value (NaN under a float comparison) never wins.
template <typename V, typename Before>
__device__ __forceinline__ void WarpArgBest(V& value, int& index, Before before) {
  for (int o = 16; o > 0; o >>= 1) {
    const V ov = __shfl_xor_sync(0xffffffffu, value, o);
    const int oi = __shfl_xor_sync(0xffffffffu, index, o);
    if (before(ov, value) || (ov == value && oi < index)) {
      value = ov;
      index = oi;
    }
  }
}

struct Greater {
  template <typename V>
  __device__ __forceinline__ bool operator()(V a, V b) const {
    return a > b;
  }
};
struct Less {
  template <typename V>
  __device__ __forceinline__ bool operator()(V a, V b) const {
    return a < b;
  }
};

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    ArgmaxKernel(const float* __restrict__ logits, int vocab, const int32_t* __restrict__ candidate,
                 const float* __restrict__ bias, int32_t* __restrict__ out) {
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
  WarpArgBest(best, best_i, Greater());
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    best = lane < kThreads / 32 ? sv[lane] : -FLT_MAX;
    best_i = lane < kThreads / 32 ? si[lane] : vocab;
    WarpArgBest(best, best_i, Greater());
    if (lane == 0) {
      const int c = candidate != nullptr ? candidate[blockIdx.x] : -1;
      if (c >= 0 && c < vocab) {
        const float boosted = row[c] + bias[blockIdx.x];
        if (boosted > best || (boosted == best && c < best_i)) best_i = c;
      }
      // A row of only NaN / -inf keeps vocab: report 0 rather than an invalid id.
      out[blockIdx.x] = best_i < vocab ? best_i : 0;
    }
  }
}

// One warp per row: the lanes search the text for the nearest occurrence of the input token
// together (texts can be long; one thread would serialize the step on the longest).
constexpr int kCopyWarps = 4;

__global__ void __launch_bounds__(kCopyWarps * 32)
    CopyCandidatesKernel(const CopyRow* __restrict__ copy, const int32_t* __restrict__ texts,
                         const int32_t* __restrict__ sample_rows,
                         const int32_t* __restrict__ resolved, int rows,
                         int32_t* __restrict__ candidate, float* __restrict__ bias) {
  const int q = blockIdx.x * kCopyWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (q >= rows) return;
  const CopyRow m = copy[q];
  if (m.bias == 0.0f) {
    if (lane == 0) {
      candidate[q] = -1;
      bias[q] = 0.0f;
    }
    return;
  }
  const int32_t* text = texts + m.text_offset;
  int position = m.position;
  bool aligned = m.aligned != 0;
  if (m.advance != 0) {
    // AdvanceCopy: the occurrence nearest to the cursor, the lower one on a tie. Each lane
    // visits increasing j, so a strict < keeps its lowest; the reduction breaks ties by j.
    const int32_t token = resolved[sample_rows[q]];
    int best_d = INT_MAX, best_j = INT_MAX;
    for (int j = lane; j < m.text_length; j += 32) {
      if (text[j] != token) continue;
      const int d = abs(j - position);
      if (d < best_d) {
        best_d = d;
        best_j = j;
      }
    }
    WarpArgBest(best_d, best_j, Less());
    if (best_j == INT_MAX) {
      aligned = false;
    } else {
      position = best_j + 1;
      aligned = true;
    }
  }
  if (lane != 0) return;
  int32_t c = -1;  // CopyCandidate
  if (aligned && position >= 0) {
    if (position < m.text_length) {
      c = text[position];
    } else if (position == m.text_length) {
      c = m.end_token;
    }
  }
  candidate[q] = c;
  bias[q] = m.bias;
}

}  // namespace

cudaError_t LaunchCopyCandidates(const CopyRow* copy, const int32_t* texts,
                                 const int32_t* sample_rows, const int32_t* resolved, int rows,
                                 int32_t* candidate, float* bias, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  CopyCandidatesKernel<<<(rows + kCopyWarps - 1) / kCopyWarps, kCopyWarps * 32, 0, stream>>>(
      copy, texts, sample_rows, resolved, rows, candidate, bias);
  return cudaGetLastError();
}

cudaError_t LaunchArgmax(const float* logits, int rows, int vocab, const int32_t* candidate,
                         const float* bias, int32_t* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  constexpr int kThreads = 1024;
  ArgmaxKernel<kThreads><<<rows, kThreads, 0, stream>>>(logits, vocab, candidate, bias, out);
  return cudaGetLastError();
}

}  // namespace gecd::kernels
