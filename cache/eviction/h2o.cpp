// cache/eviction/h2o.cpp: the candidates with the most accumulated attention mass.
#include "lorakv/cache/eviction/policies.h"
#include "lorakv/cache/eviction/ranking.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

std::vector<int64_t> H2oPolicy::choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                                       int64_t room) const {
  LORAKV_ASSERT(lane.scores.size() == lane.positions.size(), "h2o needs a score per row");
  return top_rows(lane.scores, candidates, room);
}

}  // namespace lorakv::cache::eviction
