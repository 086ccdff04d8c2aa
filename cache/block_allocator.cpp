// cache/block_allocator.cpp: reference counts, the free list and the LRU of cached blocks.
#include "lorakv/cache/block_allocator.h"

#include <algorithm>

#include "lorakv/common/errors.h"

namespace lorakv::cache {

BlockAllocator::BlockAllocator(int64_t num_blocks) {
  LORAKV_ASSERT(num_blocks >= 0, "negative pool size " << num_blocks);
  refcounts_.assign(static_cast<size_t>(num_blocks), 0);
  tags_.assign(static_cast<size_t>(num_blocks), 0);
  lru_prev_.assign(static_cast<size_t>(num_blocks), kNotCached);
  lru_next_.assign(static_cast<size_t>(num_blocks), kNotCached);
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t i = num_blocks - 1; i >= 0; --i) free_.emplace_back(i);
}

void BlockAllocator::check_id(BlockId block) const {
  LORAKV_ASSERT(block.valid() && block.value() < num_blocks(), "block " << block.value() << " out of range");
}

bool BlockAllocator::is_cached(BlockId block) const {
  check_id(block);
  return lru_prev_[static_cast<size_t>(block.value())] != kNotCached;
}

void BlockAllocator::link_newest(int64_t b) {
  lru_prev_[static_cast<size_t>(b)] = lru_newest_;
  lru_next_[static_cast<size_t>(b)] = -1;
  if (lru_newest_ >= 0) {
    lru_next_[static_cast<size_t>(lru_newest_)] = b;
  } else {
    lru_oldest_ = b;
  }
  lru_newest_ = b;
  ++num_cached_;
}

void BlockAllocator::unlink(int64_t b) {
  const int64_t prev = lru_prev_[static_cast<size_t>(b)], next = lru_next_[static_cast<size_t>(b)];
  LORAKV_ASSERT(prev != kNotCached, "block " << b << " is not cached");
  (prev >= 0 ? lru_next_[static_cast<size_t>(prev)] : lru_oldest_) = next;
  (next >= 0 ? lru_prev_[static_cast<size_t>(next)] : lru_newest_) = prev;
  lru_prev_[static_cast<size_t>(b)] = lru_next_[static_cast<size_t>(b)] = kNotCached;
  --num_cached_;
}

std::optional<std::vector<BlockId>> BlockAllocator::allocate(int64_t n, uint32_t tag, std::vector<BlockId>* reclaimed) {
  LORAKV_ASSERT(n >= 0, "negative allocation " << n);
  if (!can_allocate(n)) return std::nullopt;
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(n));  // every allocation before the first change
  const auto from_lru = std::max<int64_t>(0, n - static_cast<int64_t>(free_.size()));
  if (reclaimed != nullptr) reclaimed->reserve(reclaimed->size() + static_cast<size_t>(from_lru));
  for (int64_t i = 0; i < n; ++i) {
    BlockId b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      b = BlockId(lru_oldest_);
      unlink(lru_oldest_);
      if (reclaimed != nullptr) reclaimed->push_back(b);
    }
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
  if (rc == 0) {
    LORAKV_ASSERT(is_cached(block), "retain of free block " << block.value());
    unlink(block.value());
    peak_used_ = std::max(peak_used_, num_used());
  }
  ++rc;
}

bool BlockAllocator::release(BlockId block, bool keep_cached) {
  check_id(block);
  int32_t& rc = refcounts_[static_cast<size_t>(block.value())];
  LORAKV_ASSERT(rc > 0, "release of free block " << block.value());
  if (--rc > 0) return false;
  if (keep_cached) {
    link_newest(block.value());
  } else {
    free_.push_back(block);  // reserved for every block: cannot allocate
  }
  return true;
}

void BlockAllocator::uncache(BlockId block) {
  check_id(block);
  unlink(block.value());
  free_.push_back(block);
}

std::vector<BlockId> BlockAllocator::cached_blocks() const {
  std::vector<BlockId> out;
  for (int64_t b = lru_oldest_; b >= 0; b = lru_next_[static_cast<size_t>(b)]) out.emplace_back(b);
  return out;
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
