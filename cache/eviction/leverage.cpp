// cache/eviction/leverage.cpp: the candidates whose keys lie most in the keys' main
// directions (scores computed from the keys when the engine evicts).
#include "lorakv/cache/eviction/policies.h"
#include "lorakv/cache/eviction/ranking.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

std::vector<int64_t> LeveragePolicy::choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                                            int64_t room) const {
  LORAKV_ASSERT(lane.scores.size() == lane.positions.size(), "leverage needs a score per row");
  return top_rows(lane.scores, candidates, room);
}

}  // namespace lorakv::cache::eviction
