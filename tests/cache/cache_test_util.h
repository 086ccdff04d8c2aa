// tests/cache/cache_test_util.h: synthetic row contents for storage tests. A row's values are
// a function of (layer, head, position, token id), so any misplaced, misaligned or wrongly
// shared row shows up as a wrong value.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "cache/paged_kv_cache.h"

namespace lorakv::cache::test {

inline float k_value(int64_t layer, int64_t head, int64_t pos, int64_t token, int64_t d) {
  return static_cast<float>(layer * 10000 + head * 1000 + token) + 0.5f * static_cast<float>(pos) +
         0.125f * static_cast<float>(d);
}

inline float c_value(int64_t agent, int64_t layer, int64_t pos, int64_t token, int64_t j) {
  return static_cast<float>(agent * 100000 + layer * 10000 + token) + 0.5f * static_cast<float>(pos) +
         0.125f * static_cast<float>(j);
}

// K rows float [T, num_kv_heads, head_dim] for tokens at positions first..first+T-1 (V = K + 0.25).
inline at::Tensor make_k(const CacheLayout& l, int64_t layer, int64_t first, const std::vector<int32_t>& tokens) {
  at::Tensor k = at::empty({static_cast<int64_t>(tokens.size()), l.num_kv_heads, l.head_dim}, at::kFloat);
  auto a = k.accessor<float, 3>();
  for (int64_t t = 0; t < k.size(0); ++t)
    for (int64_t h = 0; h < l.num_kv_heads; ++h)
      for (int64_t d = 0; d < l.head_dim; ++d) a[t][h][d] = k_value(layer, h, first + t, tokens[static_cast<size_t>(t)], d);
  return k;
}

// Residual rows float [T, rank] for positions first..first+T-1 of `all_tokens`.
inline at::Tensor make_c(int64_t agent, int64_t layer, int64_t rank, int64_t first, int64_t count,
                         const std::vector<int32_t>& all_tokens) {
  at::Tensor c = at::empty({count, rank}, at::kFloat);
  auto a = c.accessor<float, 2>();
  for (int64_t t = 0; t < count; ++t)
    for (int64_t j = 0; j < rank; ++j)
      a[t][j] = c_value(agent, layer, first + t, all_tokens[static_cast<size_t>(first + t)], j);
  return c;
}

// Expected K of one lane: float [heads_per_group, N, head_dim] for rows at `positions`.
inline at::Tensor expected_k(const CacheLayout& l, int64_t layer, int64_t group, const at::Tensor& positions,
                             const std::vector<int32_t>& tokens) {
  const at::Tensor tok = at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), at::kLong)
                             .index_select(0, positions).to(at::kFloat);
  const at::Tensor heads = at::arange(group * l.heads_per_group, (group + 1) * l.heads_per_group, at::kFloat);
  const at::Tensor d = at::arange(l.head_dim, at::kFloat);
  const at::Tensor row = tok + 0.5 * positions.to(at::kFloat) + static_cast<double>(layer * 10000);  // [N]
  return (heads.view({-1, 1, 1}) * 1000 + row.view({1, -1, 1})) + 0.125 * d.view({1, 1, -1});
}

// Checks every lane of `seq` against the synthetic contents of `tokens`, and the positions
// in storage against the bookkeeping's mirror.
inline void expect_lanes_hold(const PagedKvCache& cache, SeqId seq, const std::vector<int32_t>& tokens) {
  const CacheLayout& l = cache.layout();
  const SequenceState& s = cache.manager().sequence(seq);
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    for (int64_t g = 0; g < l.num_groups(); ++g) {
      GatheredRows rows = cache.gather_lane(seq, layer, g);
      const std::vector<int32_t>& mirror = s.lanes[static_cast<size_t>(l.lane(layer, g))].positions;
      ASSERT_TRUE(at::equal(rows.positions, at::tensor(std::vector<int64_t>(mirror.begin(), mirror.end()), at::kLong)))
          << "seq " << seq.value() << " layer " << layer << " group " << g;
      const at::Tensor want = expected_k(l, layer, g, rows.positions, tokens);
      ASSERT_TRUE(at::equal(rows.k.to(at::kFloat), want)) << "K of seq " << seq.value() << " layer " << layer << " group " << g;
      ASSERT_TRUE(at::equal(rows.v.to(at::kFloat), want + 0.25)) << "V of seq " << seq.value() << " layer " << layer;
    }
  }
}

// Checks that a residual stream holds, in every lane, exactly one row per base row whose
// position is below `covered`, in the same order, with the agent's synthetic values.
inline void expect_residual_aligned(const PagedKvCache& cache, SeqId seq, const ContentKey& key, int64_t agent,
                                    const std::vector<int32_t>& tokens) {
  const CacheLayout& l = cache.layout();
  const ResidualStream& r = cache.manager().residual(seq, key);
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    const int64_t rank = r.ranks[static_cast<size_t>(layer)];
    if (rank == 0) continue;
    for (int64_t g = 0; g < l.num_groups(); ++g) {
      GatheredResidual res = cache.gather_residual(seq, key, layer, g);
      GatheredRows base = cache.gather_lane(seq, layer, g);
      const int64_t n = (base.positions < r.covered).sum().item<int64_t>();
      ASSERT_EQ(res.c.size(0), n) << "seq " << seq.value() << " layer " << layer << " group " << g;
      ASSERT_TRUE(at::equal(res.positions, base.positions.narrow(0, 0, n)));
      const at::Tensor p = res.positions;
      const at::Tensor tok = at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), at::kLong)
                                 .index_select(0, p).to(at::kFloat);
      const at::Tensor row = tok + 0.5 * p.to(at::kFloat) + static_cast<double>(agent * 100000 + layer * 10000);
      const at::Tensor want = row.view({-1, 1}) + 0.125 * at::arange(rank, at::kFloat).view({1, -1});
      ASSERT_TRUE(at::equal(res.c.to(at::kFloat), want)) << "residual of seq " << seq.value() << " layer " << layer;
    }
  }
}

}  // namespace lorakv::cache::test
