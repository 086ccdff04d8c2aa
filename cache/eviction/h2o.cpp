// cache/eviction/h2o.cpp: the candidates with the most accumulated attention mass.
#include <algorithm>

#include "lorakv/cache/eviction/policies.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

std::vector<int64_t> H2oPolicy::choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                                       int64_t room) const {
  LORAKV_ASSERT(lane.scores.size() == lane.positions.size(), "h2o needs a score per row");
  std::vector<int64_t> order = candidates;
  // Highest score first; among equal scores the newer row (larger index).
  auto better = [&](int64_t a, int64_t b) {
    const float sa = lane.scores[static_cast<size_t>(a)], sb = lane.scores[static_cast<size_t>(b)];
    return sa != sb ? sa > sb : a > b;
  };
  std::nth_element(order.begin(), order.begin() + (room - 1), order.end(), better);
  order.resize(static_cast<size_t>(room));
  return order;
}

}  // namespace lorakv::cache::eviction
