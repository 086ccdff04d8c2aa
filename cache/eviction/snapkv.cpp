// cache/eviction/snapkv.cpp: observation-window scores, pooled over neighbouring rows.
#include <algorithm>

#include "lorakv/cache/eviction/policies.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

std::vector<int64_t> SnapKvPolicy::choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                                          int64_t room) const {
  LORAKV_ASSERT(lane.scores.size() == lane.positions.size(), "snapkv needs a score per row");
  const auto n = static_cast<int64_t>(lane.scores.size());
  // Average over rows i - 2 .. i + 2 of the lane (out of range counts as 0, as kvpress pads).
  std::vector<float> pooled(static_cast<size_t>(n), 0.f);
  const int64_t half = kPoolWidth / 2;
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int64_t j = std::max<int64_t>(0, i - half); j <= std::min(n - 1, i + half); ++j) sum += lane.scores[static_cast<size_t>(j)];
    pooled[static_cast<size_t>(i)] = sum / static_cast<float>(kPoolWidth);
  }
  std::vector<int64_t> order = candidates;
  auto better = [&](int64_t a, int64_t b) {
    const float pa = pooled[static_cast<size_t>(a)], pb = pooled[static_cast<size_t>(b)];
    return pa != pb ? pa > pb : a > b;  // ties: the newer row
  };
  std::nth_element(order.begin(), order.begin() + (room - 1), order.end(), better);
  order.resize(static_cast<size_t>(room));
  return order;
}

}  // namespace lorakv::cache::eviction
