// cache/eviction/snapkv.cpp: observation-window scores, pooled over neighbouring rows.
#include <algorithm>
#include <limits>

#include "lorakv/cache/eviction/policies.h"
#include "lorakv/cache/eviction/ranking.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

std::vector<float> SnapKvPolicy::observed_scores(const LaneCandidates& lane) const {
  LORAKV_ASSERT(lane.scores.size() == lane.positions.size(), "" << config().policy << " needs a score per row");
  // kvpress cuts the window's rows off before it pools, so the last rows before the window
  // pool with zeros, not with the window's own mass. The window's rows are protected; they
  // rank first, as kvpress gives them the highest score.
  const size_t window = std::min(lane.scores.size(), static_cast<size_t>(config().window));
  std::vector<float> pooled =
      pooled_scores(std::vector<float>(lane.scores.begin(), lane.scores.end() - static_cast<std::ptrdiff_t>(window)), kPoolWidth);
  pooled.resize(lane.scores.size(), std::numeric_limits<float>::max());
  return pooled;
}

std::vector<int64_t> SnapKvPolicy::choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                                          int64_t room) const {
  return top_rows(observed_scores(lane), candidates, room);
}

}  // namespace lorakv::cache::eviction
