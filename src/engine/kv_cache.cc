#include "engine/kv_cache.h"

#include <utility>

namespace gecd::engine {

int KvBlocksForBudget(const KvCacheLayout& layout, size_t element_bytes, int megabytes) {
  const int64_t block_bytes = layout.ElementsPerBlock() * static_cast<int64_t>(element_bytes);
  if (block_bytes <= 0 || megabytes <= 0) return 0;
  return static_cast<int>(static_cast<int64_t>(megabytes) * (1 << 20) / block_bytes);
}

KvBlockPool::KvBlockPool(int num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  free_.reserve(num_blocks);
  // Highest id at the bottom so the first allocations get blocks 0, 1, 2, ...
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

BlockTable::BlockTable(BlockTable&& other) noexcept
    : pool_(other.pool_), blocks_(std::move(other.blocks_)) {
  other.blocks_.clear();
}

BlockTable& BlockTable::operator=(BlockTable&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = other.pool_;
    blocks_ = std::move(other.blocks_);
    other.blocks_.clear();
  }
  return *this;
}

bool BlockTable::Reserve(int64_t num_tokens) {
  const int64_t needed = pool_->BlocksFor(num_tokens) - static_cast<int64_t>(blocks_.size());
  if (needed <= 0) return true;
  if (needed > static_cast<int64_t>(pool_->free_.size())) return false;
  for (int64_t i = 0; i < needed; ++i) {
    blocks_.push_back(pool_->free_.back());
    pool_->free_.pop_back();
  }
  return true;
}

void BlockTable::Release() {
  // Reverse order keeps a sequence's blocks contiguous when the next one takes them.
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) pool_->free_.push_back(*it);
  blocks_.clear();
}

}  // namespace gecd::engine
