// cache/eviction/ranking.h: the ranking steps the scoring policies share.
#pragma once

#include <cstdint>
#include <vector>

namespace lorakv::cache::eviction {

// The `room` indices of `candidates` with the highest scores[index], in any order; among
// equal scores the newer row (larger index) wins.
std::vector<int64_t> top_rows(const std::vector<float>& scores, std::vector<int64_t> candidates, int64_t room);

// Each score averaged over the `width` rows centred on it (width odd), rows outside the lane
// counted as 0: kvpress's avg_pool1d(kernel_size=width, padding=width/2) for SnapKV.
std::vector<float> pooled_scores(const std::vector<float>& scores, int64_t width);

}  // namespace lorakv::cache::eviction
