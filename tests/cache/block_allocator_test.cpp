// tests/cache/block_allocator_test.cpp: free list, reference counts, shortfalls as values.
#include "lorakv/cache/block_allocator.h"

#include <gtest/gtest.h>

#include <set>

#include "lorakv/common/errors.h"

namespace lorakv::cache {
namespace {

TEST(BlockAllocator, AllocatesDistinctBlocksUntilFull) {
  BlockAllocator a(5);
  auto first = a.allocate(3);
  ASSERT_TRUE(first.has_value());
  auto second = a.allocate(2);
  ASSERT_TRUE(second.has_value());
  std::set<int64_t> ids;
  for (BlockId b : *first) ids.insert(b.value());
  for (BlockId b : *second) ids.insert(b.value());
  EXPECT_EQ(ids.size(), 5u);
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), 4);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_EQ(a.num_used(), 5);
}

TEST(BlockAllocator, ShortfallIsAValueAndChangesNothing) {
  BlockAllocator a(4);
  ASSERT_TRUE(a.allocate(3).has_value());
  EXPECT_FALSE(a.can_allocate(2));
  EXPECT_FALSE(a.allocate(2).has_value());
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_TRUE(a.allocate(1).has_value());
  EXPECT_FALSE(a.allocate(1).has_value());
  EXPECT_TRUE(a.allocate(0).has_value());
}

TEST(BlockAllocator, ReferenceCountsFreeOnLastRelease) {
  BlockAllocator a(2);
  BlockId b = a.allocate(1, 7).value().front();
  EXPECT_EQ(a.refcount(b), 1);
  EXPECT_EQ(a.tag(b), 7u);
  a.retain(b);
  a.retain(b);
  EXPECT_EQ(a.refcount(b), 3);
  EXPECT_FALSE(a.release(b));
  EXPECT_FALSE(a.release(b));
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_TRUE(a.release(b));
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_FALSE(a.in_use(b));
}

TEST(BlockAllocator, PeakTracksHighWaterMark) {
  BlockAllocator a(8);
  auto x = a.allocate(6).value();
  for (BlockId b : x) a.release(b);
  ASSERT_TRUE(a.allocate(2).has_value());
  EXPECT_EQ(a.peak_used(), 6);
  EXPECT_EQ(a.num_used(), 2);
}

TEST(BlockAllocator, CachedBlocksCountFreeAndAreTakenLastOldestFirst) {
  BlockAllocator a(4);
  const std::vector<BlockId> x = a.allocate(4, 3).value();
  EXPECT_TRUE(a.release(x[2], /*keep_cached=*/true));
  EXPECT_TRUE(a.release(x[0], /*keep_cached=*/true));
  EXPECT_TRUE(a.release(x[1], /*keep_cached=*/false));
  EXPECT_EQ(a.num_free(), 3);  // one free, two cached
  EXPECT_EQ(a.num_cached(), 2);
  EXPECT_EQ(a.num_used(), 1);
  EXPECT_EQ(a.cached_blocks(), (std::vector<BlockId>{x[2], x[0]}));
  EXPECT_TRUE(a.is_cached(x[0]));
  EXPECT_FALSE(a.in_use(x[0]));
  EXPECT_EQ(a.tag(x[0]), 3u);  // kept while cached

  // Retaining a cached block takes it back out of the LRU; a free one cannot be retained.
  a.retain(x[2]);
  EXPECT_EQ(a.refcount(x[2]), 1);
  EXPECT_FALSE(a.is_cached(x[2]));
  EXPECT_EQ(a.cached_blocks(), (std::vector<BlockId>{x[0]}));
  EXPECT_THROW(a.retain(x[1]), InternalError);
  EXPECT_TRUE(a.release(x[2], true));  // now the newest: x[0], x[2]

  // The free block goes first, then the oldest cached one, which is reported.
  std::vector<BlockId> reclaimed;
  EXPECT_EQ(a.allocate(2, 0, &reclaimed).value(), (std::vector<BlockId>{x[1], x[0]}));
  EXPECT_EQ(reclaimed, (std::vector<BlockId>{x[0]}));
  EXPECT_EQ(a.cached_blocks(), (std::vector<BlockId>{x[2]}));
  EXPECT_FALSE(a.allocate(2).has_value());  // one cached block left: a shortfall, nothing taken
  EXPECT_EQ(a.num_cached(), 1);

  // A cached block nothing names any more becomes free.
  a.uncache(x[2]);
  EXPECT_EQ(a.num_cached(), 0);
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_THROW(a.uncache(x[2]), InternalError);
  EXPECT_EQ(a.peak_used(), 4);
}

TEST(BlockAllocator, MisuseIsABug) {
  BlockAllocator a(2);
  EXPECT_THROW(a.release(BlockId(0)), InternalError);
  EXPECT_THROW(a.retain(BlockId(1)), InternalError);
  EXPECT_THROW(a.refcount(BlockId(2)), InternalError);
}

}  // namespace
}  // namespace lorakv::cache
