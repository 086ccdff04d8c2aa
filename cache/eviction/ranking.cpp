// cache/eviction/ranking.cpp: top rows by score, and SnapKV's pooling.
#include "lorakv/cache/eviction/ranking.h"

#include <algorithm>

#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

std::vector<int64_t> top_rows(const std::vector<float>& scores, std::vector<int64_t> candidates, int64_t room) {
  LORAKV_ASSERT(room >= 0 && room <= static_cast<int64_t>(candidates.size()), "top_rows: room " << room << " of " << candidates.size());
  if (room == 0) return {};
  auto better = [&](int64_t a, int64_t b) {
    const float sa = scores[static_cast<size_t>(a)], sb = scores[static_cast<size_t>(b)];
    return sa != sb ? sa > sb : a > b;
  };
  std::nth_element(candidates.begin(), candidates.begin() + (room - 1), candidates.end(), better);
  candidates.resize(static_cast<size_t>(room));
  return candidates;
}

std::vector<float> pooled_scores(const std::vector<float>& scores, int64_t width) {
  const auto n = static_cast<int64_t>(scores.size());
  const int64_t half = width / 2;
  std::vector<float> pooled(static_cast<size_t>(n), 0.f);
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int64_t j = std::max<int64_t>(0, i - half); j <= std::min(n - 1, i + half); ++j) sum += scores[static_cast<size_t>(j)];
    pooled[static_cast<size_t>(i)] = sum / static_cast<float>(width);
  }
  return pooled;
}

}  // namespace lorakv::cache::eviction
