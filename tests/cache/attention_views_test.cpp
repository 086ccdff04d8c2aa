// tests/cache/attention_views_test.cpp: the fused kernel read through the cache's views
// matches the plain reference over the cache's dense gathers (one token set per layer,
// per-head lanes after compaction, forks after copy-on-write, bfloat16 pools, a layer the
// stream does not adapt); the views alias the pools' tensors; bad input is refused.
#include "lorakv/cache/attention_views.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>

#include "attention_views_case.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache {
namespace {

using test::agent_v_stream;
using test::append_random;
using test::compare_views_with_reference;

using test::random_agent;
using test::views_config;
using test::ViewAgent;

constexpr int64_t kAllHeads = test::kViewKvHeads;  // heads_per_group: one token set per layer

// A cache holding sequence 1 of `tokens` random rows with the agent's v stream over all of them.
PagedKvCache filled_cache(int64_t heads_per_group, StorageDtype dtype, int64_t tokens,
                          std::vector<int64_t> ranks = {test::kViewRank, test::kViewRank}) {
  PagedKvCache cache(views_config(heads_per_group, dtype));
  cache.create_sequence(SeqId(1), ContentKey::base(dtype));
  cache.attach_residual(SeqId(1), agent_v_stream(dtype), std::move(ranks), {});
  append_random(cache, SeqId(1), tokens, {agent_v_stream(dtype)});
  return cache;
}

// One agent with the v residual and its B, one on the base alone, both at the sequence's end.
std::vector<ViewAgent> two_agents(int64_t last_position, int64_t rank) {
  return {random_agent(3, last_position, true, rank), random_agent(2, last_position, false, 0)};
}

// Every layer of `seq` through the views against the reference, for two_agents(last_position).
void expect_every_layer_matches(const PagedKvCache& cache, SeqId seq, StorageDtype dtype, int64_t last_position) {
  for (int64_t layer = 0; layer < test::kViewLayers; ++layer) {
    EXPECT_EQ(compare_views_with_reference(cache, seq, layer, agent_v_stream(dtype), two_agents(last_position, test::kViewRank)),
              "")
        << "layer " << layer;
  }
}

TEST(AttentionViews, SharedTokenSetMatchesReference) {
  at::manual_seed(1);
  const StorageDtype dtype = StorageDtype::kFloat32;
  // 11 rows: two full blocks and a partial one.
  PagedKvCache cache = filled_cache(kAllHeads, dtype, 11);
  expect_every_layer_matches(cache, SeqId(1), dtype, 10);
}

TEST(AttentionViews, CompactedLanesMatchReference) {
  for (int64_t hpg : {int64_t{1}, kAllHeads}) {
    SCOPED_TRACE("heads_per_group " + std::to_string(hpg));
    at::manual_seed(2);
    const StorageDtype dtype = StorageDtype::kFloat32;
    PagedKvCache cache = filled_cache(hpg, dtype, 19);
    // Every lane (per head when hpg = 1) keeps its own random ~60% of the rows: gaps in positions.
    std::mt19937 rng(3);
    KeepSets keep(static_cast<size_t>(cache.layout().num_lanes()));
    for (std::vector<int64_t>& lane : keep) {
      for (int64_t row = 0; row < 19; ++row) {
        if (rng() % 10 < 6 || (row == 18 && lane.empty())) lane.push_back(row);
      }
    }
    ASSERT_TRUE(cache.compact(SeqId(1), keep));
    // Rows appended after compaction land behind each lane's survivors.
    append_random(cache, SeqId(1), 3, {agent_v_stream(dtype)});
    if (hpg == 1) {
      ASSERT_NE(cache.gather_lane(SeqId(1), 1, 0).positions.size(0), cache.gather_lane(SeqId(1), 1, 1).positions.size(0))
          << "the heads should keep different rows";
    }
    expect_every_layer_matches(cache, SeqId(1), dtype, 21);
  }
}

TEST(AttentionViews, EvictedRowsAreMaskedAsIfGone) {
  for (int64_t hpg : {int64_t{1}, kAllHeads}) {
    SCOPED_TRACE("heads_per_group " + std::to_string(hpg));
    at::manual_seed(8);
    const StorageDtype dtype = StorageDtype::kFloat32;
    PagedKvCache cache = filled_cache(hpg, dtype, 19);
    // Each lane keeps its own random ~half of the rows: some blocks go whole, the rest of
    // the left rows stay masked in their blocks. The reference gathers only live rows.
    std::mt19937 rng(9);
    KeepSets keep(static_cast<size_t>(cache.layout().num_lanes()));
    for (std::vector<int64_t>& lane : keep) {
      for (int64_t row = 0; row < 19; ++row) {
        if ((row >= 4 && row < 8) || row == 18 || (row < 4 ? rng() % 4 != 0 : rng() % 2 == 0)) {
          if (row < 4 || row >= 8) lane.push_back(row);
        }
      }
    }
    const EvictionOutcome out = cache.evict(SeqId(1), keep);
    ASSERT_GT(out.rows_masked, 0);
    ASSERT_GT(out.blocks_dropped[0], 0) << "rows 4..7 leave every lane";
    append_random(cache, SeqId(1), 3, {agent_v_stream(dtype)});
    expect_every_layer_matches(cache, SeqId(1), dtype, 21);
  }
}

TEST(AttentionViews, ForksReadTheirOwnRowsAfterCopyOnWrite) {
  at::manual_seed(4);
  const StorageDtype dtype = StorageDtype::kFloat32;
  PagedKvCache cache = filled_cache(1, dtype, 6);  // the second block is partly filled
  cache.fork(SeqId(1), SeqId(2));
  append_random(cache, SeqId(2), 3, {agent_v_stream(dtype)});
  append_random(cache, SeqId(1), 2, {agent_v_stream(dtype)});
  const BaseLayerView one = BaseLayerView::of(cache, SeqId(1), 0);
  const BaseLayerView two = BaseLayerView::of(cache, SeqId(2), 0);
  EXPECT_EQ(one.lane(0).num_rows, 8);
  EXPECT_EQ(two.lane(0).num_rows, 9);
  EXPECT_EQ(one.lane(0).blocks[0], two.lane(0).blocks[0]) << "the full first block stays shared";
  EXPECT_NE(one.lane(0).blocks[1], two.lane(0).blocks[1]) << "the written partial block was copied";
  expect_every_layer_matches(cache, SeqId(1), dtype, 7);
  expect_every_layer_matches(cache, SeqId(2), dtype, 8);
}

TEST(AttentionViews, ViewsPointIntoThePoolsWithoutCopying) {
  at::manual_seed(5);
  const StorageDtype dtype = StorageDtype::kFloat32;
  PagedKvCache cache = filled_cache(1, dtype, 9);
  const BaseLayerView base = BaseLayerView::of(cache, SeqId(1), 1);
  const ResidualLayerView residual = ResidualLayerView::of(cache, SeqId(1), agent_v_stream(dtype), 1);
  EXPECT_EQ(base.storage().k, cache.pool(0).a().data_ptr());
  EXPECT_EQ(base.storage().v, cache.pool(0).b().data_ptr());
  EXPECT_EQ(base.storage().positions, cache.pool(0).positions().data_ptr<int32_t>());
  ASSERT_NE(residual.storage(), nullptr);
  EXPECT_EQ(residual.storage()->k, cache.pool(1).a().data_ptr());
  // The block ids are the manager's, lane by lane.
  const CacheLayout& l = cache.layout();
  for (int64_t g = 0; g < l.num_groups(); ++g) {
    const BlockTable& table = cache.manager().sequence(SeqId(1)).lanes[static_cast<size_t>(l.lane(1, g))].table;
    ASSERT_EQ(base.lane(g).num_rows, table.num_rows);
    for (size_t b = 0; b < table.blocks.size(); ++b) EXPECT_EQ(base.lane(g).blocks[b], table.blocks[b].value());
  }
}

TEST(AttentionViews, BFloat16PoolMatchesReference) {
  at::manual_seed(6);
  const StorageDtype dtype = StorageDtype::kBFloat16;
  PagedKvCache cache = filled_cache(1, dtype, 13);
  EXPECT_EQ(BaseLayerView::of(cache, SeqId(1), 0).storage().dtype, kernels::ElementType::kBFloat16);
  expect_every_layer_matches(cache, SeqId(1), dtype, 12);
}

// An int8 base pool: the views carry its scales, and the kernel reads what the pool holds
// (the reference gathers the same int8 rows times their scales), after compaction and
// eviction moved and masked rows.
TEST(AttentionViews, Int8PoolMatchesReference) {
  for (int64_t hpg : {int64_t{1}, kAllHeads}) {
    SCOPED_TRACE("heads_per_group " + std::to_string(hpg));
    at::manual_seed(16);
    const StorageDtype dtype = StorageDtype::kInt8;
    PagedKvCache cache = filled_cache(hpg, dtype, 19);
    const BaseLayerView view = BaseLayerView::of(cache, SeqId(1), 0);  // storage() points into it
    const kernels::PagedStorage& st = view.storage();
    EXPECT_EQ(st.dtype, kernels::ElementType::kInt8);
    EXPECT_EQ(st.k_scales, cache.pool(0).a_scales().data_ptr<float>());
    EXPECT_EQ(st.v_scales, cache.pool(0).b_scales().data_ptr<float>());
    expect_every_layer_matches(cache, SeqId(1), dtype, 18);
    std::mt19937 rng(17);
    KeepSets keep(static_cast<size_t>(cache.layout().num_lanes()));
    for (std::vector<int64_t>& lane : keep) {
      for (int64_t row = 0; row < 19; ++row) {
        if (rng() % 10 < 6 || row == 18) lane.push_back(row);
      }
    }
    ASSERT_TRUE(cache.compact(SeqId(1), keep));
    append_random(cache, SeqId(1), 3, {agent_v_stream(dtype)});
    expect_every_layer_matches(cache, SeqId(1), dtype, 21);
  }
}

TEST(AttentionViews, LayerWithoutAdapterGivesRankZeroStream) {
  at::manual_seed(7);
  const StorageDtype dtype = StorageDtype::kFloat32;
  PagedKvCache cache = filled_cache(kAllHeads, dtype, 10, {test::kViewRank, 0});
  const ResidualLayerView unadapted = ResidualLayerView::of(cache, SeqId(1), agent_v_stream(dtype), 1);
  EXPECT_EQ(unadapted.rank(), 0);
  EXPECT_EQ(unadapted.storage(), nullptr);
  const kernels::LowRankStream s = unadapted.stream(nullptr, 0, 0);
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.c_lanes, nullptr);
  EXPECT_EQ(ResidualLayerView::of(cache, SeqId(1), agent_v_stream(dtype), 0).rank(), test::kViewRank);
  // The "adapted" agent reads the rank-0 stream: plain base attention at layer 1.
  EXPECT_EQ(compare_views_with_reference(cache, SeqId(1), 1, agent_v_stream(dtype), two_agents(9, 0)), "");
}

// Expects `make` to throw InvalidArgumentError whose message contains `words`.
void expect_refused(const std::function<void()>& make, const std::string& words) {
  try {
    make();
    ADD_FAILURE() << "accepted; expected a refusal mentioning \"" << words << "\"";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(AttentionViews, BadInputIsRefused) {
  at::manual_seed(8);
  const StorageDtype dtype = StorageDtype::kFloat32;
  PagedKvCache cache = filled_cache(1, dtype, 5);
  const ContentKey v = agent_v_stream(dtype);
  expect_refused([&] { BaseLayerView::of(cache, SeqId(9), 0); }, "unknown sequence 9");
  expect_refused([&] { ResidualLayerView::of(cache, SeqId(9), v, 0); }, "unknown sequence 9");
  expect_refused([&] { BaseLayerView::of(cache, SeqId(1), 2); }, "layer 2 outside 0..1");
  expect_refused([&] { BaseLayerView::of(cache, SeqId(1), -1); }, "layer -1 outside 0..1");
  expect_refused([&] { ResidualLayerView::of(cache, SeqId(1), v, 2); }, "layer 2 outside 0..1");
  const ContentKey k_stream = ContentKey::residual(StreamKind::kResidualK, dtype, v.adapter);
  expect_refused([&] { ResidualLayerView::of(cache, SeqId(1), k_stream, 0); }, "has no residual stream (k, ");
  // A stream attached late covers none of the 5 base rows yet: the kernel could not read it.
  cache.attach_residual(SeqId(1), k_stream, {test::kViewRank, test::kViewRank}, {});
  expect_refused([&] { ResidualLayerView::of(cache, SeqId(1), k_stream, 1); }, "C rows for 0 of the 5 base rows");
}

TEST(AttentionViews, PoolOffTheCpuIsRefused) {
  // Meta tensors have a device but no memory: a stand-in for a GPU pool on a CPU-only machine.
  PagedKvCache cache(views_config(1, StorageDtype::kFloat32), at::kMeta);
  cache.create_sequence(SeqId(1), ContentKey::base(StorageDtype::kFloat32));
  const ContentKey v = agent_v_stream(StorageDtype::kFloat32);
  cache.attach_residual(SeqId(1), v, {test::kViewRank, test::kViewRank}, {});
  expect_refused([&] { BaseLayerView::of(cache, SeqId(1), 0); }, "reads CPU pools only");
  expect_refused([&] { ResidualLayerView::of(cache, SeqId(1), v, 0); }, "reads CPU pools only");
}

}  // namespace
}  // namespace lorakv::cache
