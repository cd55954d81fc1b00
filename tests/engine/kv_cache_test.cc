#include "engine/kv_cache.h"

#include <algorithm>
#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace gecd::engine {
namespace {

TEST(KvBlockPoolTest, ReserveTakesWholeBlocksAndReleaseReturnsThem) {
  KvBlockPool pool(8, 4);
  BlockTable table(&pool);
  ASSERT_TRUE(table.Reserve(5));  // 5 tokens -> 2 blocks of 4
  EXPECT_EQ(table.blocks().size(), 2u);
  EXPECT_EQ(table.capacity_tokens(), 8);
  EXPECT_EQ(pool.num_free(), 6);
  ASSERT_TRUE(table.Reserve(8));  // still fits
  EXPECT_EQ(pool.num_free(), 6);
  ASSERT_TRUE(table.Reserve(9));
  EXPECT_EQ(pool.num_free(), 5);
  table.Release();
  EXPECT_TRUE(table.blocks().empty());
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(KvBlockPoolTest, TablesNeverShareABlock) {
  KvBlockPool pool(10, 2);
  BlockTable a(&pool), b(&pool), c(&pool);
  ASSERT_TRUE(a.Reserve(6));
  ASSERT_TRUE(b.Reserve(3));
  ASSERT_TRUE(c.Reserve(8));
  std::set<int32_t> seen;
  for (const BlockTable* t : {&a, &b, &c}) {
    for (int32_t block : t->blocks()) {
      EXPECT_GE(block, 0);
      EXPECT_LT(block, 10);
      EXPECT_TRUE(seen.insert(block).second) << "block " << block << " handed out twice";
    }
  }
  EXPECT_EQ(seen.size(), 9u);
}

TEST(KvBlockPoolTest, ExhaustionIsAllOrNothing) {
  KvBlockPool pool(3, 4);
  BlockTable a(&pool), b(&pool);
  ASSERT_TRUE(a.Reserve(8));
  EXPECT_FALSE(b.Reserve(9));  // needs 3 blocks, only 1 free
  EXPECT_TRUE(b.blocks().empty());
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_FALSE(a.Reserve(13));  // a needs 2 more
  EXPECT_EQ(a.blocks().size(), 2u);
  EXPECT_EQ(pool.num_free(), 1);
  ASSERT_TRUE(b.Reserve(4));
  EXPECT_EQ(pool.num_free(), 0);
}

TEST(KvBlockPoolTest, FreedBlocksAreReused) {
  KvBlockPool pool(4, 1);
  BlockTable a(&pool);
  ASSERT_TRUE(a.Reserve(4));
  std::vector<int32_t> taken(a.blocks().begin(), a.blocks().end());
  a.Release();
  BlockTable b(&pool);
  ASSERT_TRUE(b.Reserve(4));
  std::vector<int32_t> again(b.blocks().begin(), b.blocks().end());
  std::sort(taken.begin(), taken.end());
  std::sort(again.begin(), again.end());
  EXPECT_EQ(taken, again);
}

TEST(KvBlockPoolTest, DestroyingOrMovingATableKeepsTheCountRight) {
  KvBlockPool pool(6, 2);
  {
    BlockTable a(&pool);
    ASSERT_TRUE(a.Reserve(5));
    BlockTable moved = std::move(a);
    EXPECT_EQ(pool.num_free(), 3);
    BlockTable other(&pool);
    ASSERT_TRUE(other.Reserve(2));
    other = std::move(moved);  // other's own block goes back
    EXPECT_EQ(pool.num_free(), 3);
    EXPECT_EQ(other.blocks().size(), 3u);
  }
  EXPECT_EQ(pool.num_free(), 6);
}

TEST(KvBlockPoolTest, BudgetSizing) {
  KvCacheLayout layout{.num_layers = 2, .num_kv_heads = 2, .head_dim = 16, .block_size = 16};
  // 2 (K,V) * 2 layers * 2 heads * 16 dims * 16 tokens * 4 bytes = 8 KiB per block.
  EXPECT_EQ(KvBlocksForBudget(layout, 4, 1), 128);
  EXPECT_EQ(KvBlocksForBudget(layout, 2, 1), 256);
  EXPECT_EQ(KvBlocksForBudget(layout, 4, 0), 0);
}

}  // namespace
}  // namespace gecd::engine
