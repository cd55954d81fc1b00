#include "kernels/device_common.cuh"
#include "kernels/embedding.h"

namespace gecd::kernels {
namespace {
using namespace detail;

__global__ void EmbeddingKernel(const uint16_t* __restrict__ table, int vocab,
                                const int32_t* __restrict__ tokens,
                                const int32_t* __restrict__ prev_index,
                                const int32_t* __restrict__ prev_tokens, int hidden,
                                float* __restrict__ x, int32_t* __restrict__ resolved) {
  const size_t t = blockIdx.x;
  int id = tokens[t];
  if (prev_index != nullptr && prev_index[t] >= 0) id = prev_tokens[prev_index[t]];
  if (id < 0 || id >= vocab) id = 0;
  if (resolved != nullptr && threadIdx.x == 0) resolved[t] = id;
  const uint16_t* row = table + static_cast<size_t>(id) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) x[t * hidden + i] = Bf16ToF(row[i]);
}

}  // namespace

cudaError_t LaunchEmbedding(const uint16_t* table, int vocab, const int32_t* tokens,
                            const int32_t* prev_index, const int32_t* prev_tokens, int rows,
                            int hidden, float* x, int32_t* resolved, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  EmbeddingKernel<<<rows, 256, 0, stream>>>(table, vocab, tokens, prev_index, prev_tokens, hidden,
                                            x, resolved);
  return cudaGetLastError();
}

}  // namespace gecd::kernels
