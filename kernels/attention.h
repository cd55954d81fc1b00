#ifndef GECD_KERNELS_ATTENTION_H_
#define GECD_KERNELS_ATTENTION_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/rope.h"

// Causal grouped-query attention over the paged bf16 KV cache (layout in kernels/rope.h), for
// any mix of prefill chunks and decodes: token t attends to positions 0..positions[t] of its
// own sequence, which must already be in the cache (LaunchRopeKvWrite of this step runs
// first, so a chunk starting at start_position > 0 sees its cached prefix and itself).
// softmax(q·kᵀ · scale) · v in f32 with an online (chunked) softmax; one thread block per
// (token, KV head) computes all query heads of that group.
namespace gecd::kernels {

struct AttentionParams {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // <= 256
  int block_size = 16;
  float scale = 1.0f;  // usually 1/sqrt(head_dim)
};

// q bf16 [rows, heads * head_dim]; out bf16 [rows, heads * head_dim].
// Returns cudaErrorInvalidValue for shapes it cannot run (head_dim > 256, too much shared
// memory: heads/kv_heads * head_dim > 4096).
cudaError_t LaunchPagedAttention(const uint16_t* q, const uint16_t* k_cache,
                                 const uint16_t* v_cache, TokenMeta meta, int rows,
                                 AttentionParams p, uint16_t* out, cudaStream_t stream);

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_ATTENTION_H_
