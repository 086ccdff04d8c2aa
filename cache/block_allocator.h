// cache/block_allocator.h: the tensor-free allocator of one block pool: a free list plus a
// reference count and an owner tag per block. The cache manager keeps one per pool; storage
// (block_pool.h) never allocates. Capacity shortfalls are values (std::nullopt), never
// exceptions. Not thread-safe: the engine step owns the cache.
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
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks() - num_free(); }
  int64_t peak_used() const { return peak_used_; }
  bool can_allocate(int64_t n) const { return n <= num_free(); }

  // n fresh blocks, each with reference count 1 and the given owner tag (used by stats to
  // attribute bytes), or nullopt (and no change) when fewer than n are free.
  std::optional<std::vector<BlockId>> allocate(int64_t n, uint32_t tag = 0);
  // One more reference to a block in use.
  void retain(BlockId block);
  // Drops one reference; returns true when the block became free.
  bool release(BlockId block);

  int32_t refcount(BlockId block) const;
  uint32_t tag(BlockId block) const;
  bool in_use(BlockId block) const { return refcount(block) > 0; }

 private:
  void check_id(BlockId block) const;

  std::vector<int32_t> refcounts_;  // per block; 0 = free
  std::vector<uint32_t> tags_;      // per block; meaningful while in use
  std::vector<BlockId> free_;       // LIFO stack of free blocks
  int64_t peak_used_ = 0;
};

}  // namespace lorakv::cache
