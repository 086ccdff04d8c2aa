// cache/eviction/adakv.cpp: one layer's budget spread over its KV heads by their SnapKV
// scores, with a floor per head.
#include <algorithm>
#include <tuple>

#include "lorakv/cache/eviction/policies.h"
#include "lorakv/cache/eviction/ranking.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

std::vector<std::vector<int64_t>> AdaKvPolicy::keep_layer(const std::vector<LaneCandidates>& lanes, int64_t budget) const {
  std::vector<std::vector<uint8_t>> kept(lanes.size());
  std::vector<std::vector<float>> pooled(lanes.size());
  int64_t num_kept = 0;
  // Each head first keeps its protected rows and, up to its floor, its own best rows
  // (kvpress's alpha_safeguard: int(budget * floor) rows, at least one).
  const int64_t floor = config().head_floor > 0 ? std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(budget) * config().head_floor)) : 0;
  for (size_t h = 0; h < lanes.size(); ++h) {
    kept[h].assign(lanes[h].positions.size(), 0);
    pooled[h] = observed_scores(lanes[h]);
    const int64_t protected_rows = protect(lanes[h], kept[h]);
    const std::vector<int64_t> candidates = unkept(kept[h]);
    const int64_t extra = std::clamp<int64_t>(floor - protected_rows, 0, static_cast<int64_t>(candidates.size()));
    for (int64_t i : top_rows(pooled[h], candidates, extra)) kept[h][static_cast<size_t>(i)] = 1;
    num_kept += protected_rows + extra;
  }
  // The rest of the layer's budget goes to the best rows of any head.
  struct Row {
    float score;
    int64_t index;
    size_t head;
  };
  std::vector<Row> rest;
  for (size_t h = 0; h < lanes.size(); ++h) {
    for (int64_t i : unkept(kept[h])) rest.push_back({pooled[h][static_cast<size_t>(i)], i, h});
  }
  const int64_t room = std::clamp<int64_t>(budget * static_cast<int64_t>(lanes.size()) - num_kept, 0, static_cast<int64_t>(rest.size()));
  if (room > 0) {
    auto better = [](const Row& a, const Row& b) { return std::tie(a.score, a.index, a.head) > std::tie(b.score, b.index, b.head); };
    std::nth_element(rest.begin(), rest.begin() + (room - 1), rest.end(), better);
    for (int64_t r = 0; r < room; ++r) kept[rest[static_cast<size_t>(r)].head][static_cast<size_t>(rest[static_cast<size_t>(r)].index)] = 1;
  }
  std::vector<std::vector<int64_t>> out(lanes.size());
  for (size_t h = 0; h < lanes.size(); ++h) {
    for (size_t i = 0; i < kept[h].size(); ++i) {
      if (kept[h][i]) out[h].push_back(static_cast<int64_t>(i));
    }
  }
  return out;
}

std::vector<int64_t> AdaKvPolicy::unkept(const std::vector<uint8_t>& kept) {
  std::vector<int64_t> rows;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (!kept[i]) rows.push_back(static_cast<int64_t>(i));
  }
  return rows;
}

}  // namespace lorakv::cache::eviction
