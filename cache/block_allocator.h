// cache/block_allocator.h: the tensor-free allocator of one block pool: reference counts and
// an owner tag per block, a free list, and an LRU of cached blocks. The cache manager keeps
// one per pool; storage (block_pool.h) never allocates. Capacity shortfalls are values
// (std::nullopt), never exceptions. Not thread-safe: the engine step owns the cache.
//
// A block whose last reference goes is free, or, when the caller says its rows are still
// findable (the prefix index names them), cached: unreferenced but kept, so a later
// sequence with the same prefix can take it back (retain). Cached blocks count as free
// (num_free): an allocation takes truly free blocks first, then cached ones, least recently
// released first, and reports those so the caller forgets what named them. The LRU is an
// intrusive list over preallocated arrays: no operation here allocates except allocate's
// result, so a rollback that retains and releases cannot fail.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "lorakv/common/ids.h"

namespace lorakv::cache {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(refcounts_.size()); }
  // Blocks an allocation can take: free plus cached.
  int64_t num_free() const { return static_cast<int64_t>(free_.size()) + num_cached_; }
  int64_t num_cached() const { return num_cached_; }
  // Blocks with a reference.
  int64_t num_used() const { return num_blocks() - num_free(); }
  int64_t peak_used() const { return peak_used_; }
  bool can_allocate(int64_t n) const { return n <= num_free(); }

  // n blocks, each with reference count 1 and the given owner tag (used by stats to
  // attribute bytes), or nullopt (and no change) when fewer than n are free or cached.
  // Cached blocks it takes (their old rows are gone) are appended to `reclaimed`.
  std::optional<std::vector<BlockId>> allocate(int64_t n, uint32_t tag = 0, std::vector<BlockId>* reclaimed = nullptr);
  // One more reference to a block in use, or to a cached block (it leaves the LRU).
  void retain(BlockId block);
  // Drops one reference; returns true when it was the last. The block is then cached when
  // `keep_cached` (its rows stay findable), else free.
  bool release(BlockId block, bool keep_cached = false);
  // A cached block nothing names any more becomes free.
  void uncache(BlockId block);

  int32_t refcount(BlockId block) const;
  uint32_t tag(BlockId block) const;
  bool in_use(BlockId block) const { return refcount(block) > 0; }
  bool is_cached(BlockId block) const;
  // Cached blocks, least recently released first (tests, stats).
  std::vector<BlockId> cached_blocks() const;

 private:
  void check_id(BlockId block) const;
  void link_newest(int64_t b);
  void unlink(int64_t b);

  std::vector<int32_t> refcounts_;  // per block; 0 = free or cached
  std::vector<uint32_t> tags_;      // per block; meaningful while in use or cached
  std::vector<BlockId> free_;       // LIFO stack of free blocks
  // The LRU of cached blocks: per block its neighbours (-1: none); kNotCached when not in it.
  static constexpr int64_t kNotCached = -2;
  std::vector<int64_t> lru_prev_, lru_next_;
  int64_t lru_oldest_ = -1, lru_newest_ = -1, num_cached_ = 0;
  int64_t peak_used_ = 0;
};

}  // namespace lorakv::cache
