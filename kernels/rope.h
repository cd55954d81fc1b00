#ifndef GECD_KERNELS_ROPE_H_
#define GECD_KERNELS_ROPE_H_

#include <cuda_runtime.h>

#include <cstdint>

// Bias + RoPE on q/k, and the K/V write into the paged bf16 cache.
//
// Paged cache of one layer (engine/kv_cache.h): [num_blocks][block_size][kv_heads][head_dim]
// bf16, separately for K and V; position p of a token lives in slot p % block_size of block
// block_ids[table_offset + p / block_size].
namespace gecd::kernels {

// Per-token step metadata, device arrays of `rows` entries.
struct TokenMeta {
  const int32_t* positions = nullptr;      // absolute position of each token
  const int32_t* table_offsets = nullptr;  // where its sequence's block table starts in block_ids
  const int32_t* block_ids = nullptr;
};

struct RopeParams {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // even
  int block_size = 16;
};

// qkv bf16 [rows, (heads + 2 kv_heads) * head_dim] (q heads, k heads, v heads). With bias
// (f32, same width) each value is first x + bias. q and k are rotated: for f < head_dim/2,
// angle = f32(position) * inv_freq[f], (x1, x2) = (v[f], v[f + half]) ->
// (x1 cos - x2 sin, x2 cos + x1 sin), as the CPU backend does (rotate_half). Writes q_out bf16
// [rows, heads * head_dim] and K, V into the layer's cache.
cudaError_t LaunchRopeKvWrite(const uint16_t* qkv, const float* bias, const float* inv_freq,
                              TokenMeta meta, int rows, RopeParams p, uint16_t* q_out,
                              uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream);

}  // namespace gecd::kernels

#endif  // GECD_KERNELS_ROPE_H_
