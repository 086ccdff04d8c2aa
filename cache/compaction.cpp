// cache/compaction.cpp: stable packing of a lane's surviving rows.
#include "lorakv/cache/compaction.h"

#include <algorithm>

#include "lorakv/common/errors.h"

namespace lorakv::cache {

CompactionPlan plan_compaction(int64_t num_rows, const std::vector<int64_t>& keep, int64_t block_size) {
  LORAKV_ASSERT(block_size > 0 && num_rows >= 0, "bad compaction shape");
  CompactionPlan plan;
  plan.num_rows_after = static_cast<int64_t>(keep.size());
  plan.num_blocks_after = (plan.num_rows_after + block_size - 1) / block_size;
  int64_t prev = -1;
  for (size_t j = 0; j < keep.size(); ++j) {
    const int64_t src = keep[j];
    LORAKV_ASSERT(src > prev && src < num_rows, "keep set must be strictly ascending rows below " << num_rows
                                                    << "; got " << src << " after " << prev);
    prev = src;
    const int64_t dst = static_cast<int64_t>(j);
    if (src == dst) continue;
    plan.moves.push_back({src, dst});
    const int64_t block = dst / block_size;
    if (plan.rewritten_blocks.empty() || plan.rewritten_blocks.back() != block) plan.rewritten_blocks.push_back(block);
  }
  const int64_t old_fill_of_last = std::min(num_rows, plan.num_blocks_after * block_size);
  if (plan.num_blocks_after > 0 && plan.num_rows_after < old_fill_of_last) {
    const int64_t last = plan.num_blocks_after - 1;
    if (plan.rewritten_blocks.empty() || plan.rewritten_blocks.back() != last) plan.truncated_block = last;
  }
  return plan;
}

std::vector<int64_t> keep_below(const std::vector<int64_t>& keep, int64_t limit) {
  return {keep.begin(), std::lower_bound(keep.begin(), keep.end(), limit)};
}

}  // namespace lorakv::cache
