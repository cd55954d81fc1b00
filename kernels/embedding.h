#ifndef GECD_KERNELS_EMBEDDING_H_
#define GECD_KERNELS_EMBEDDING_H_

#include <cuda_runtime.h>

#include <cstdint>

// Embedding gather into the f32 residual stream, resolving tokens sampled by the previous step
// on the device (so a step can be enqueued before the previous one's tokens reach the host).
namespace gecd::kernels {

// For each row t: id = prev_index[t] >= 0 ? prev_tokens[prev_index[t]] : tokens[t];
// x[t, :] = f32(table[id, :]) (table bf16 [vocab, hidden]); resolved[t] = id if resolved.
// An id outside [0, vocab) (impossible for validated input) reads row 0 instead of faulting.
cudaError_t LaunchEmbedding(const uint16_t* table, int vocab, const int32_t* tokens,
                            const int32_t* prev_index, const int32_t* prev_tokens, int rows,
                            int hidden, float* x, int32_t* resolved, cudaStream_t stream);

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_EMBEDDING_H_
