#ifndef GECD_ENGINE_KV_CACHE_H_
#define GECD_ENGINE_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

// The paged KV cache's bookkeeping. Storage is split into fixed-size blocks of `block_size`
// token slots, each holding K and V for every layer and KV head. One KvBlockPool hands blocks
// to all sequences; each sequence's BlockTable maps its token positions to blocks (position p
// lives in slot p % block_size of block table[p / block_size]). The memory itself belongs to the
// backend (f32 on the CPU, bf16 on the GPU); only the block ids are shared.
namespace gecd::engine {

struct KvCacheLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;  // tokens per block
  int num_blocks = 0;

  // K and V elements of one block, all layers.
  int64_t ElementsPerBlock() const {
    return 2LL * num_layers * num_kv_heads * head_dim * block_size;
  }
  int64_t capacity_tokens() const { return static_cast<int64_t>(num_blocks) * block_size; }
};

// How many blocks of `layout` fit in `megabytes` when each element takes `element_bytes`.
int KvBlocksForBudget(const KvCacheLayout& layout, size_t element_bytes, int megabytes);

// The free list of a fixed number of blocks. Not thread-safe: the engine's step loop owns it.
class KvBlockPool {
 public:
  KvBlockPool(int num_blocks, int block_size);
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  // Blocks that hold `num_tokens` positions (rounded up).
  int BlocksFor(int64_t num_tokens) const {
    return static_cast<int>((num_tokens + block_size_ - 1) / block_size_);
  }

 private:
  friend class BlockTable;
  int num_blocks_;
  int block_size_;
  std::vector<int32_t> free_;  // a stack, so freed (cache-warm) blocks are reused first
};

// One sequence's blocks. Returns them to the pool when released or destroyed, so dropping a
// sequence can never leak cache.
class BlockTable {
 public:
  explicit BlockTable(KvBlockPool* pool) : pool_(pool) {}
  ~BlockTable() { Release(); }
  BlockTable(BlockTable&& other) noexcept;
  BlockTable& operator=(BlockTable&& other) noexcept;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  // Grows the table to hold `num_tokens` positions in total. All or nothing: returns false and
  // takes no block when the pool has too few free, so the caller can preempt and retry.
  bool Reserve(int64_t num_tokens);
  void Release();

  std::span<const int32_t> blocks() const { return blocks_; }
  int64_t capacity_tokens() const {
    return static_cast<int64_t>(blocks_.size()) * pool_->block_size();
  }

 private:
  KvBlockPool* pool_;
  std::vector<int32_t> blocks_;
};

}  // namespace gecd::engine

#endif  // GECD_ENGINE_KV_CACHE_H_
