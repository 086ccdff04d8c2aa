// tests/cache/paged_kv_cache_test.cpp: storage kept in step with bookkeeping: round trips,
// copy-on-write contents, per-head compaction with aligned residual rows (including an
// agent that catches up after eviction), measured bytes against a closed form, and bad
// shapes and indices at the write/gather entry points as InvalidArgumentError.
#include "lorakv/cache/paged_kv_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <utility>

#include "cache_test_util.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache {
namespace {

using test::expect_lanes_hold;
using test::expect_residual_aligned;
using test::make_c;
using test::make_k;

const AdapterIdentity kA{1, 1};
const AdapterIdentity kB{2, 2};

std::vector<int32_t> tokens_of(int32_t n, int32_t start = 3) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

CacheConfig config(int64_t heads_per_group, StorageDtype dtype = StorageDtype::kFloat32) {
  CacheConfig c;
  c.layout = {2, 3, 4, 4, heads_per_group};
  c.base_dtype = dtype;
  c.residual_dtype = dtype == StorageDtype::kInt8 ? StorageDtype::kFloat32 : dtype;
  c.num_base_blocks = 128;
  c.residual_pools = {{2, 64}, {3, 64}};
  return c;
}

// Appends tokens written by `writer`, with residual rows for the given streams. `history`:
// every token of the sequence after this append, needed once a compaction dropped the
// sequence's own token list.
void append(PagedKvCache& cache, SeqId seq, const std::vector<int32_t>& new_tokens, AdapterIdentity writer,
            const std::vector<std::pair<ContentKey, int64_t>>& residual_agents, int64_t residual_tokens,
            const std::vector<int32_t>* history = nullptr) {
  AppendRequest req{new_tokens, writer, {}};
  for (const auto& [key, agent] : residual_agents) req.residuals.push_back({key, residual_tokens});
  std::vector<int64_t> covered_before;
  for (const auto& [key, agent] : residual_agents) covered_before.push_back(cache.manager().residual(seq, key).covered);
  auto slots = cache.append(seq, req);
  ASSERT_TRUE(slots);
  const SequenceState& state = cache.manager().sequence(seq);
  ASSERT_TRUE(state.keeps_tokens || history) << "the sequence keeps no token list: pass the history";
  const std::vector<int32_t>& all = state.keeps_tokens ? state.tokens : *history;
  ASSERT_EQ(static_cast<int64_t>(all.size()), state.num_positions);
  for (int64_t layer = 0; layer < cache.layout().num_layers; ++layer) {
    at::Tensor k = make_k(cache.layout(), layer, slots->first_position, new_tokens);
    cache.write_base(*slots, layer, k, k + 0.25);
    for (size_t i = 0; i < residual_agents.size(); ++i) {
      const ResidualStream& r = cache.manager().residual(seq, residual_agents[i].first);
      const int64_t rank = r.ranks[static_cast<size_t>(layer)];
      if (rank == 0) continue;
      cache.write_residual(*slots, i, layer,
                           make_c(residual_agents[i].second, layer, rank, covered_before[i], residual_tokens, all));
    }
  }
}

TEST(PagedKvCache, RoundTripAndCopyOnWrite) {
  for (int64_t hpg : {1, 3}) {
    PagedKvCache cache(config(hpg));
    const ContentKey base = ContentKey::base(StorageDtype::kFloat32);
    cache.create_sequence(SeqId(1), base);
    append(cache, SeqId(1), tokens_of(6), kA, {}, 0);
    cache.fork(SeqId(1), SeqId(2));
    append(cache, SeqId(2), {40, 41, 42}, kB, {}, 0);
    append(cache, SeqId(1), {50}, kA, {}, 0);
    std::vector<int32_t> t1 = tokens_of(6), t2 = tokens_of(6);
    t1.push_back(50);
    t2.insert(t2.end(), {40, 41, 42});
    expect_lanes_hold(cache, SeqId(1), t1);
    expect_lanes_hold(cache, SeqId(2), t2);
    GatheredRows layer = cache.gather_layer(SeqId(2), 1);
    EXPECT_EQ(layer.k.sizes(), (at::IntArrayRef{3, 9, 4}));
    EXPECT_TRUE(at::equal(layer.k.transpose(0, 1), make_k(cache.layout(), 1, 0, t2)));
  }
}

TEST(PagedKvCache, PerHeadCompactionKeepsResidualsAligned) {
  {
    // float32 holds the synthetic values exactly (bf16 storage: BFloat16StoresRowsInTwoBytes).
    const StorageDtype dtype = StorageDtype::kFloat32;
    PagedKvCache cache(config(/*heads_per_group=*/1, dtype));
    const ContentKey base = ContentKey::base(dtype);
    const ContentKey res_a = ContentKey::residual(StreamKind::kResidualV, dtype, kA);
    const ContentKey res_b = ContentKey::residual(StreamKind::kResidualV, dtype, kB);
    const ContentKey res_bk = ContentKey::residual(StreamKind::kResidualK, dtype, kB);
    cache.create_sequence(SeqId(1), base);
    cache.attach_residual(SeqId(1), res_a, {2, 3}, {});
    std::vector<int32_t> tokens = tokens_of(14);
    append(cache, SeqId(1), tokens, kA, {{res_a, 1}}, 14);
    // Agent B joins late and lags: it has covered only 5 positions when eviction strikes.
    cache.attach_residual(SeqId(1), res_b, {3, 2}, {});
    cache.attach_residual(SeqId(1), res_bk, {0, 2}, {});
    append(cache, SeqId(1), {}, kB, {{res_b, 2}, {res_bk, 2}}, 5);
    std::mt19937 rng(7);
    KeepSets keep(static_cast<size_t>(cache.layout().num_lanes()));
    for (auto& k : keep) {
      for (int64_t row = 0; row < 14; ++row) {
        if (rng() % 2) k.push_back(row);
      }
    }
    const int64_t used_before = cache.stats().bytes_in_use;
    ASSERT_TRUE(cache.compact(SeqId(1), keep));
    EXPECT_LT(cache.stats().bytes_in_use, used_before);
    expect_lanes_hold(cache, SeqId(1), tokens);
    expect_residual_aligned(cache, SeqId(1), res_a, 1, tokens);
    expect_residual_aligned(cache, SeqId(1), res_b, 2, tokens);
    expect_residual_aligned(cache, SeqId(1), res_bk, 2, tokens);
    // B catches up over positions 5..13: each head stores rows only for the tokens it kept.
    EXPECT_FALSE(cache.manager().sequence(SeqId(1)).keeps_tokens) << "compaction drops the token list";
    EXPECT_TRUE(cache.manager().sequence(SeqId(1)).tokens.empty());
    append(cache, SeqId(1), {}, kB, {{res_b, 2}, {res_bk, 2}}, 9, &tokens);
    expect_residual_aligned(cache, SeqId(1), res_b, 2, tokens);
    // New tokens after eviction land behind every head's survivors, residuals included.
    std::vector<int32_t> more{60, 61, 62, 63, 64};
    tokens.insert(tokens.end(), more.begin(), more.end());
    append(cache, SeqId(1), more, kA, {{res_a, 1}}, 5, &tokens);
    expect_lanes_hold(cache, SeqId(1), tokens);
    expect_residual_aligned(cache, SeqId(1), res_a, 1, tokens);
    expect_residual_aligned(cache, SeqId(1), res_b, 2, tokens);
    cache.release(SeqId(1));
    EXPECT_EQ(cache.stats().bytes_in_use, 0);
  }
}

// A suffix sequence with a residual stream (a reply kept in the shared layout, writer
// author's fast form) is adopted onto the end of its sequence: base rows and residual rows
// land after the sequence's own, aligned, covering every position; a stream the suffix lacks
// stays behind; a target stream that does not cover every position is refused.
TEST(PagedKvCache, AdoptedSuffixBringsItsResidualRows) {
  for (int64_t hpg : {1, 3}) {
    PagedKvCache cache(config(hpg));
    const ContentKey base = ContentKey::base(StorageDtype::kFloat32);
    const ContentKey res_a = ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, kA);
    const ContentKey res_b = ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, kB);
    std::vector<int32_t> all = tokens_of(10);
    const std::vector<int32_t> reply = {50, 51, 52, 53, 54, 55};
    cache.create_sequence(SeqId(1), base);
    cache.attach_residual(SeqId(1), res_a, {2, 3}, {});
    cache.attach_residual(SeqId(1), res_b, {3, 2}, {});
    append(cache, SeqId(1), all, kA, {{res_a, 1}}, 10);
    append(cache, SeqId(1), {}, kB, {{res_b, 2}}, 4);  // B lags
    all.insert(all.end(), reply.begin(), reply.end());
    cache.create_suffix_sequence(SeqId(2), base, 10);
    cache.attach_residual(SeqId(2), res_a, {2, 3}, {});
    const std::optional<AppendSlots> slots = cache.append(SeqId(2), {reply, kA, {{res_a, 6}}});
    ASSERT_TRUE(slots);
    EXPECT_EQ(slots->first_position, 10);
    for (int64_t layer = 0; layer < cache.layout().num_layers; ++layer) {
      const at::Tensor k = make_k(cache.layout(), layer, 10, reply);
      cache.write_base(*slots, layer, k, k + 0.25);
      cache.write_residual(*slots, 0, layer, make_c(1, layer, layer == 0 ? 2 : 3, 10, 6, all));
    }
    // Refused while the target's stream does not cover every position.
    cache.create_suffix_sequence(SeqId(3), base, 10);
    cache.attach_residual(SeqId(3), res_b, {3, 2}, {});
    EXPECT_THROW(cache.adopt_suffix(SeqId(1), SeqId(3)), InternalError);
    EXPECT_EQ(cache.manager().sequence(SeqId(1)).num_positions, 10) << "a refused adoption changes nothing";
    cache.release(SeqId(3));
    ASSERT_TRUE(cache.adopt_suffix(SeqId(1), SeqId(2)));
    EXPECT_FALSE(cache.manager().has_sequence(SeqId(2)));
    expect_lanes_hold(cache, SeqId(1), all);
    expect_residual_aligned(cache, SeqId(1), res_a, 1, all);
    EXPECT_EQ(cache.manager().residual(SeqId(1), res_a).covered, 16);
    EXPECT_EQ(cache.manager().residual(SeqId(1), res_b).covered, 4);
    append(cache, SeqId(1), {}, kB, {{res_b, 2}}, 12, &all);  // B catches up over the adopted rows
    expect_residual_aligned(cache, SeqId(1), res_b, 2, all);
    cache.release(SeqId(1));
    EXPECT_EQ(cache.stats().bytes_in_use, 0);
  }
}

TEST(PagedKvCache, BFloat16StoresRowsInTwoBytes) {
  PagedKvCache cache(config(3, StorageDtype::kBFloat16));
  cache.create_sequence(SeqId(1), ContentKey::base(StorageDtype::kBFloat16));
  auto slots = cache.append(SeqId(1), {{1, 2, 3}, kA, {}});
  ASSERT_TRUE(slots);
  at::Tensor k = at::randn({3, 3, 4});
  cache.write_base(*slots, 0, k, -k);
  GatheredRows rows = cache.gather_layer(SeqId(1), 0);
  EXPECT_EQ(rows.k.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(rows.k.transpose(0, 1), k.to(at::kBFloat16)));
  EXPECT_EQ(cache.pool(0).a_bytes_per_block(), 4 * 3 * 4 * 2);
}

// A cache with one sequence of 3 tokens appended (not yet written), residual stream `res`
// of ranks {0, 2} attached and covering them. heads_per_group 1: 3 lanes per layer.
struct OneAppend {
  PagedKvCache cache{config(1)};
  ContentKey res = ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, kA);
  AppendSlots slots;
  OneAppend() {
    cache.create_sequence(SeqId(1), ContentKey::base(StorageDtype::kFloat32));
    cache.attach_residual(SeqId(1), res, {0, 2}, {});
    std::optional<AppendSlots> s = cache.append(SeqId(1), {{1, 2, 3}, kA, {{res, 3}}});
    EXPECT_TRUE(s);
    slots = *s;
  }
};

TEST(PagedKvCache, WriteBaseRefusesBadShapesAndLayers) {
  OneAppend f;
  const at::Tensor k = at::zeros({3, 3, 4});  // [T, num_kv_heads, head_dim]
  EXPECT_THROW(f.cache.write_base(f.slots, 0, at::zeros({3, 2, 4}), at::zeros({3, 2, 4})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_base(f.slots, 0, at::zeros({3, 3, 5}), at::zeros({3, 3, 5})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_base(f.slots, 0, at::zeros({2, 3, 4}), at::zeros({2, 3, 4})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_base(f.slots, 0, k, at::zeros({3, 3, 3})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_base(f.slots, 0, at::zeros({9, 4}), at::zeros({9, 4})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_base(f.slots, 0, k, at::Tensor()), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_base(f.slots, 0, k.to(at::kLong), k.to(at::kLong)), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_base(f.slots, 2, k, k), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_base(f.slots, -1, k, k), InvalidArgumentError);
  AppendSlots foreign = f.slots;
  foreign.base.pop_back();
  EXPECT_THROW(f.cache.write_base(foreign, 0, k, k), InvalidArgumentError);
  try {
    f.cache.write_base(f.slots, 0, at::zeros({3, 2, 4}), at::zeros({3, 2, 4}));
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("write_base: float k, v [T, 3, 4] expected, got [3, 2, 4]"),
              std::string::npos)
        << e.what();
  }
  f.cache.write_base(f.slots, 0, k, k);  // the right shape still goes in
}

// An engine step's base rows as one scatter per lane: three appends to three sequences, their
// rows at places of one batch (not in order, with rows between that no append owns), land
// where each append's own write_base puts them; with and without per-head token sets, float32
// and int8 pools.
TEST(PagedKvCache, BatchWriteEqualsEachAppendsOwnWrite) {
  for (int64_t hpg : {1, 3}) {
    for (StorageDtype dtype : {StorageDtype::kFloat32, StorageDtype::kInt8}) {
      PagedKvCache batched(config(hpg, dtype)), each(config(hpg, dtype));
      const std::vector<std::vector<int32_t>> tokens = {{5, 6, 7}, {8}, {9, 10}};
      const std::vector<int64_t> first_rows = {4, 0, 1};  // rows 3 and 7 of the batch are no one's
      const at::Tensor k = at::randn({8, 3, 4}), v = at::randn({8, 3, 4});
      std::vector<AppendSlots> slots_b, slots_e;
      for (int32_t i = 0; i < 3; ++i) {
        for (PagedKvCache* c : {&batched, &each}) {
          c->create_sequence(SeqId(i + 1), ContentKey::base(dtype));
          std::optional<AppendSlots> s = c->append(SeqId(i + 1), {tokens[static_cast<size_t>(i)], kA, {}});
          ASSERT_TRUE(s);
          (c == &batched ? slots_b : slots_e).push_back(*s);
        }
      }
      std::vector<BatchAppend> appends;
      for (size_t i = 0; i < 3; ++i) appends.push_back({&slots_b[i], first_rows[i]});
      const BatchWritePlan plan = batched.plan_batch_writes(appends);
      for (int64_t layer = 0; layer < 2; ++layer) {
        batched.write_batch_base(plan, layer, k, v);
        for (size_t i = 0; i < 3; ++i) {
          const int64_t n = static_cast<int64_t>(tokens[i].size());
          each.write_base(slots_e[i], layer, k.narrow(0, first_rows[i], n), v.narrow(0, first_rows[i], n));
        }
      }
      for (int32_t i = 0; i < 3; ++i) {
        for (int64_t layer = 0; layer < 2; ++layer) {
          const GatheredRows x = batched.gather_layer(SeqId(i + 1), layer), y = each.gather_layer(SeqId(i + 1), layer);
          EXPECT_TRUE(at::equal(x.k, y.k) && at::equal(x.v, y.v)) << "sequence " << i + 1 << ", layer " << layer;
        }
      }
      // One append alone on consecutive rows takes no gather and lands the same.
      const BatchWritePlan one = batched.plan_batch_writes({{&slots_b[0], 4}});
      EXPECT_FALSE(one.base[0].sources.defined());
      EXPECT_TRUE(plan.base[0].sources.defined());
    }
  }
}

TEST(PagedKvCache, BatchWriteRefusesBadShapesLayersAndForeignSlots) {
  OneAppend f;
  const BatchWritePlan plan = f.cache.plan_batch_writes({{&f.slots, 2}});
  const at::Tensor k = at::zeros({5, 3, 4});
  EXPECT_THROW(f.cache.write_batch_base(plan, 0, at::zeros({5, 2, 4}), at::zeros({5, 2, 4})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_batch_base(plan, 0, k, at::zeros({5, 3, 3})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_batch_base(plan, 0, at::zeros({4, 3, 4}), at::zeros({4, 3, 4})), InvalidArgumentError)
      << "rows 2..4 of a batch of 4";
  EXPECT_THROW(f.cache.write_batch_base(plan, 2, k, k), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_batch_base(BatchWritePlan{}, 0, k, k), InvalidArgumentError);
  AppendSlots foreign = f.slots;
  foreign.base.pop_back();
  EXPECT_THROW(f.cache.plan_batch_writes({{&foreign, 0}}), InvalidArgumentError);
  EXPECT_THROW(f.cache.plan_batch_writes({{nullptr, 0}}), InvalidArgumentError);
  f.cache.write_batch_base(plan, 0, k, k);  // the right shape still goes in
}

TEST(PagedKvCache, WriteResidualRefusesBadShapesAndIndices) {
  OneAppend f;
  // Layer 1 has rank 2; layer 0 has rank 0 (no rows, nothing to check against).
  f.cache.write_residual(f.slots, 0, 1, at::zeros({3, 2}));
  EXPECT_THROW(f.cache.write_residual(f.slots, 0, 1, at::zeros({3, 3})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_residual(f.slots, 0, 1, at::zeros({2, 2})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_residual(f.slots, 0, 1, at::zeros({6})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_residual(f.slots, 0, 1, at::zeros({3, 2}, at::kLong)), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_residual(f.slots, 1, 1, at::zeros({3, 2})), InvalidArgumentError);
  EXPECT_THROW(f.cache.write_residual(f.slots, 0, 2, at::zeros({3, 2})), InvalidArgumentError);
}

TEST(PagedKvCache, GathersRefuseBadLanesAndMismatchedRequests) {
  OneAppend f;
  for (int64_t layer = 0; layer < 2; ++layer) {
    const at::Tensor k = make_k(f.cache.layout(), layer, 0, {1, 2, 3});
    f.cache.write_base(f.slots, layer, k, k);
  }
  f.cache.write_residual(f.slots, 0, 1, at::zeros({3, 2}));
  EXPECT_THROW(f.cache.gather_lane(SeqId(1), 2, 0), InvalidArgumentError);
  EXPECT_THROW(f.cache.gather_lane(SeqId(1), 0, 3), InvalidArgumentError);
  EXPECT_THROW(f.cache.gather_layer(SeqId(1), -1), InvalidArgumentError);
  EXPECT_THROW(f.cache.gather_residual(SeqId(1), f.res, 1, 3), InvalidArgumentError);
  EXPECT_EQ(f.cache.gather_residual(SeqId(1), f.res, 1, 0).c.sizes(), (at::IntArrayRef{3, 2}));
  EXPECT_THROW(f.cache.gather_residual(SeqId(1), f.res, 0, 0), InvalidArgumentError);  // rank 0 at layer 0
  // Per-head eviction: the lanes of layer 0 keep different rows, so one layer tensor cannot hold them.
  KeepSets keep(static_cast<size_t>(f.cache.layout().num_lanes()), std::vector<int64_t>{0, 1, 2});
  keep[1] = {0, 2};
  ASSERT_TRUE(f.cache.compact(SeqId(1), keep));
  EXPECT_THROW(f.cache.gather_layer(SeqId(1), 0), InvalidArgumentError);
  EXPECT_EQ(f.cache.gather_layer(SeqId(1), 1).k.sizes(), (at::IntArrayRef{3, 3, 4}));
}

TEST(BlockPool, WriteRefusesRowsOfAnotherShape) {
  BlockPoolSpec spec;
  spec.num_blocks = 2;
  spec.block_size = 4;
  spec.row_shape = {1, 4};
  spec.base = true;
  BlockPool pool(spec);
  const at::Tensor slots = at::tensor({0, 5}, at::kLong);
  pool.write(slots, at::ones({2, 1, 4}), at::ones({2, 1, 4}));
  EXPECT_THROW(pool.write(slots, at::ones({2, 4}), at::ones({2, 4})), InvalidArgumentError);
  EXPECT_THROW(pool.write(slots, at::ones({3, 1, 4}), at::ones({3, 1, 4})), InvalidArgumentError);
  EXPECT_THROW(pool.write(slots, at::ones({2, 1, 4}), at::ones({2, 1, 3})), InvalidArgumentError);
  EXPECT_THROW(pool.write(slots, at::ones({2, 1, 4})), InvalidArgumentError);  // V missing
}

}  // namespace
}  // namespace lorakv::cache
