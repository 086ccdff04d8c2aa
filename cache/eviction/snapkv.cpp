// cache/eviction/snapkv.cpp: observation-window scores, pooled over neighbouring rows.
#include "lorakv/cache/eviction/policies.h"
#include "lorakv/cache/eviction/ranking.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

std::vector<int64_t> SnapKvPolicy::choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                                          int64_t room) const {
  LORAKV_ASSERT(lane.scores.size() == lane.positions.size(), "" << config().policy << " needs a score per row");
  return top_rows(pooled_scores(lane.scores, kPoolWidth), candidates, room);
}

}  // namespace lorakv::cache::eviction
