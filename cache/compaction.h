// cache/compaction.h: the tensor-free planning half of eviction's compaction. Given the rows
// one lane keeps, it packs the survivors to the front in their original order (so rows stay
// sorted by position and residual rows stay a prefix of base rows), and says which rows move,
// which blocks get rewritten and how many blocks remain. The cache manager turns a plan into
// copy-on-write copies, slot moves and freed blocks; storage (block_pool.h) moves the rows.
#pragma once

#include <cstdint>
#include <vector>

namespace lorakv::cache {

// A row changing place inside one lane, as indices into the lane's row order.
struct RowMove {
  int64_t src_row = 0;
  int64_t dst_row = 0;
};

struct CompactionPlan {
  int64_t num_rows_after = 0;
  int64_t num_blocks_after = 0;
  std::vector<RowMove> moves;              // ascending dst_row; always dst_row < src_row
  std::vector<int64_t> rewritten_blocks;   // block indices (< num_blocks_after) receiving moves
  int64_t truncated_block = -1;            // last kept block when it loses tail rows but receives
                                           // no move (its rows stay valid; it just holds fewer), or -1
};

// keep: strictly ascending row indices in [0, num_rows). Pure; microseconds for typical lanes.
CompactionPlan plan_compaction(int64_t num_rows, const std::vector<int64_t>& keep, int64_t block_size);

// The kept rows of `keep` below `limit` (a residual stream's fill): its residual keep set.
std::vector<int64_t> keep_below(const std::vector<int64_t>& keep, int64_t limit);

}  // namespace lorakv::cache
