// cache/block_allocator.cpp: free list and reference counts of one pool.
#include "lorakv/cache/block_allocator.h"

#include <algorithm>

#include "lorakv/common/errors.h"

namespace lorakv::cache {

BlockAllocator::BlockAllocator(int64_t num_blocks) {
  LORAKV_ASSERT(num_blocks >= 0, "negative pool size " << num_blocks);
  refcounts_.assign(static_cast<size_t>(num_blocks), 0);
  tags_.assign(static_cast<size_t>(num_blocks), 0);
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t i = num_blocks - 1; i >= 0; --i) free_.emplace_back(i);
}

void BlockAllocator::check_id(BlockId block) const {
  LORAKV_ASSERT(block.valid() && block.value() < num_blocks(), "block " << block.value() << " out of range");
}

std::optional<std::vector<BlockId>> BlockAllocator::allocate(int64_t n, uint32_t tag) {
  LORAKV_ASSERT(n >= 0, "negative allocation " << n);
  if (!can_allocate(n)) return std::nullopt;
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    BlockId b = free_.back();
    free_.pop_back();
    refcounts_[static_cast<size_t>(b.value())] = 1;
    tags_[static_cast<size_t>(b.value())] = tag;
    out.push_back(b);
  }
  peak_used_ = std::max(peak_used_, num_used());
  return out;
}

void BlockAllocator::retain(BlockId block) {
  check_id(block);
  int32_t& rc = refcounts_[static_cast<size_t>(block.value())];
  LORAKV_ASSERT(rc > 0, "retain of free block " << block.value());
  ++rc;
}

bool BlockAllocator::release(BlockId block) {
  check_id(block);
  int32_t& rc = refcounts_[static_cast<size_t>(block.value())];
  LORAKV_ASSERT(rc > 0, "release of free block " << block.value());
  if (--rc > 0) return false;
  free_.push_back(block);
  return true;
}

int32_t BlockAllocator::refcount(BlockId block) const {
  check_id(block);
  return refcounts_[static_cast<size_t>(block.value())];
}

uint32_t BlockAllocator::tag(BlockId block) const {
  check_id(block);
  return tags_[static_cast<size_t>(block.value())];
}

}  // namespace lorakv::cache
