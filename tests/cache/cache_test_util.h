// tests/cache/cache_test_util.h: synthetic row contents for storage tests. Two kinds:
//  - per-token rows (make_k, make_c, ...): a function of (layer, head, position, token id),
//    so a misplaced or misaligned row shows up as a wrong value;
//  - history rows (RowHistory, ...): a function of every token id, row writer and
//    compaction epoch up to the row's position, of the stream's owner and of (layer, head),
//    as real rows are (position p's K depends on tokens 0..p and on whose hidden states
//    computed them). So a row reused under another prefix, from another writer, or written
//    after a compaction shows up as a wrong value too.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "lorakv/cache/paged_kv_cache.h"

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

// ---- History rows ----

// splitmix64 finaliser over a running hash, the test's own (independent of cache/).
inline uint64_t history_mix(uint64_t h, uint64_t value) {
  uint64_t z = h + 0x9e3779b97f4a7c15ULL + value * 0xd6e8feb86659fd93ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// 20 bits of a hash as a float, exact in float32 with room for three fraction bits.
inline float history_value(uint64_t h) { return static_cast<float>(h >> 44); }

// What one sequence's base rows were computed from, position by position. Writers and
// owners are small agent numbers (0 = the base model); the test maps them to identities.
struct RowHistory {
  int64_t base_owner = 0;        // adapter of the base content key (0: pure base rows)
  std::vector<int32_t> tokens;
  std::vector<int64_t> writers;  // whose hidden states filled each position's base rows
  std::vector<uint64_t> epochs;  // 0 while never compacted, then unique per compaction
};

// What one residual stream's rows were computed from (over its sequence's base rows).
struct ResidualHistory {
  int64_t owner = 0;             // the agent (or group) whose A made C = X A
  std::vector<int64_t> writers;  // per covered position
  std::vector<uint64_t> epochs;
};

// Running hash of positions 0..p, for every p: tokens, writers, epochs and the owner.
inline std::vector<uint64_t> base_prefix_hashes(const RowHistory& h) {
  std::vector<uint64_t> out;
  uint64_t run = history_mix(0x5eed, static_cast<uint64_t>(h.base_owner));
  for (size_t p = 0; p < h.tokens.size(); ++p) {
    run = history_mix(history_mix(history_mix(run, static_cast<uint32_t>(h.tokens[p])),
                                  static_cast<uint64_t>(h.writers[p])), h.epochs[p]);
    out.push_back(run);
  }
  return out;
}

// Per covered position: the base prefix hash there combined with the residual's own
// running hash (C at p depends on the base rows attended and on its writers so far).
inline std::vector<uint64_t> residual_prefix_hashes(const RowHistory& base, const ResidualHistory& r) {
  const std::vector<uint64_t> hb = base_prefix_hashes(base);
  std::vector<uint64_t> out;
  uint64_t run = history_mix(0xc0de, static_cast<uint64_t>(r.owner));
  for (size_t p = 0; p < r.writers.size(); ++p) {
    run = history_mix(history_mix(run, static_cast<uint64_t>(r.writers[p])), r.epochs[p]);
    out.push_back(history_mix(hb[p], run));
  }
  return out;
}

inline float history_k_value(uint64_t prefix_hash, int64_t layer, int64_t head, int64_t d) {
  return history_value(history_mix(history_mix(prefix_hash, static_cast<uint64_t>(layer)), static_cast<uint64_t>(head))) +
         0.125f * static_cast<float>(d);
}

inline float history_c_value(uint64_t prefix_hash, int64_t layer, int64_t j) {
  return history_value(history_mix(prefix_hash, static_cast<uint64_t>(layer) + 1000)) + 0.125f * static_cast<float>(j);
}

// K rows float [count, num_kv_heads, head_dim] of positions first..first+count-1 (V = K + 0.25).
inline at::Tensor history_k(const CacheLayout& l, int64_t layer, int64_t first, int64_t count, const RowHistory& h) {
  const std::vector<uint64_t> hb = base_prefix_hashes(h);
  at::Tensor k = at::empty({count, l.num_kv_heads, l.head_dim}, at::kFloat);
  auto a = k.accessor<float, 3>();
  for (int64_t t = 0; t < count; ++t)
    for (int64_t head = 0; head < l.num_kv_heads; ++head)
      for (int64_t d = 0; d < l.head_dim; ++d) a[t][head][d] = history_k_value(hb[static_cast<size_t>(first + t)], layer, head, d);
  return k;
}

// Residual rows float [count, rank] of positions first..first+count-1.
inline at::Tensor history_c(int64_t layer, int64_t rank, int64_t first, int64_t count, const RowHistory& base,
                            const ResidualHistory& r) {
  const std::vector<uint64_t> hr = residual_prefix_hashes(base, r);
  at::Tensor c = at::empty({count, rank}, at::kFloat);
  auto a = c.accessor<float, 2>();
  for (int64_t t = 0; t < count; ++t)
    for (int64_t j = 0; j < rank; ++j) a[t][j] = history_c_value(hr[static_cast<size_t>(first + t)], layer, j);
  return c;
}

// Checks every lane of `seq`: the gathered positions equal the bookkeeping's, and every
// row holds what its position's history would have written there.
inline void expect_lanes_hold_history(const PagedKvCache& cache, SeqId seq, const RowHistory& h) {
  const CacheLayout& l = cache.layout();
  const SequenceState& s = cache.manager().sequence(seq);
  const std::vector<uint64_t> hb = base_prefix_hashes(h);
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    for (int64_t g = 0; g < l.num_groups(); ++g) {
      GatheredRows rows = cache.gather_lane(seq, layer, g);
      const std::vector<int32_t>& mirror = s.lanes[static_cast<size_t>(l.lane(layer, g))].positions;
      ASSERT_TRUE(at::equal(rows.positions, at::tensor(std::vector<int64_t>(mirror.begin(), mirror.end()), at::kLong)))
          << "seq " << seq.value() << " layer " << layer << " group " << g;
      at::Tensor want = at::empty({l.heads_per_group, rows.positions.size(0), l.head_dim}, at::kFloat);
      auto w = want.accessor<float, 3>();
      auto pos = rows.positions.accessor<int64_t, 1>();
      for (int64_t i = 0; i < want.size(1); ++i) {
        ASSERT_LT(pos[i], static_cast<int64_t>(hb.size())) << "row past the sequence's tokens";
        for (int64_t hh = 0; hh < l.heads_per_group; ++hh)
          for (int64_t d = 0; d < l.head_dim; ++d)
            w[hh][i][d] = history_k_value(hb[static_cast<size_t>(pos[i])], layer, g * l.heads_per_group + hh, d);
      }
      ASSERT_TRUE(at::equal(rows.k.to(at::kFloat), want))
          << "K of seq " << seq.value() << " layer " << layer << " group " << g << ": a row from another history";
      ASSERT_TRUE(at::equal(rows.v.to(at::kFloat), want + 0.25)) << "V of seq " << seq.value() << " layer " << layer;
    }
  }
}

// Checks that a residual stream holds, in every lane, exactly one row per base row whose
// position is below `covered`, in the same order, each what its history would write.
inline void expect_residual_holds_history(const PagedKvCache& cache, SeqId seq, const ContentKey& key,
                                          const RowHistory& base, const ResidualHistory& r) {
  const CacheLayout& l = cache.layout();
  const ResidualStream& stream = cache.manager().residual(seq, key);
  ASSERT_EQ(stream.covered, static_cast<int64_t>(r.writers.size()));
  const std::vector<uint64_t> hr = residual_prefix_hashes(base, r);
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    const int64_t rank = stream.ranks[static_cast<size_t>(layer)];
    if (rank == 0) continue;
    for (int64_t g = 0; g < l.num_groups(); ++g) {
      GatheredResidual res = cache.gather_residual(seq, key, layer, g);
      GatheredRows rows = cache.gather_lane(seq, layer, g);
      const int64_t n = (rows.positions < stream.covered).sum().item<int64_t>();
      ASSERT_EQ(res.c.size(0), n) << "seq " << seq.value() << " layer " << layer << " group " << g;
      ASSERT_TRUE(at::equal(res.positions, rows.positions.narrow(0, 0, n)));
      at::Tensor want = at::empty({n, rank}, at::kFloat);
      auto w = want.accessor<float, 2>();
      auto pos = res.positions.accessor<int64_t, 1>();
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < rank; ++j) w[i][j] = history_c_value(hr[static_cast<size_t>(pos[i])], layer, j);
      ASSERT_TRUE(at::equal(res.c.to(at::kFloat), want))
          << "residual of seq " << seq.value() << " layer " << layer << " group " << g << ": a row from another history";
    }
  }
}

}  // namespace lorakv::cache::test
