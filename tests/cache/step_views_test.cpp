// tests/cache/step_views_test.cpp: one step's views of every layer (StepViews) are the views
// BaseLayerView / ResidualLayerView build per layer: the same block ids, row counts and RoPE
// bounds, for full and limited reads, per-head lanes after compaction, private (suffix)
// rows, and a layer the stream does not adapt; and bad reads are refused.
#include "lorakv/cache/step_views.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attention_views_case.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache {
namespace {

using test::agent_v_stream;
using test::append_random;
using test::views_config;

// "" when the lanes agree (ids of the blocks the rows use, rows, max RoPE position).
std::string compare_lanes(const kernels::LaneRows* ours, const kernels::LaneRows* theirs, int64_t n, int64_t block_size) {
  for (int64_t l = 0; l < n; ++l) {
    const kernels::LaneRows &a = ours[l], &b = theirs[l];
    const std::string where = "lane " + std::to_string(l) + ": ";
    if (a.num_rows != b.num_rows) return where + std::to_string(a.num_rows) + " rows, not " + std::to_string(b.num_rows);
    if (a.max_rope_position != b.max_rope_position) {
      return where + "max RoPE position " + std::to_string(a.max_rope_position) + ", not " + std::to_string(b.max_rope_position);
    }
    for (int64_t i = 0; i < (a.num_rows + block_size - 1) / block_size; ++i) {
      if (a.blocks[i] != b.blocks[i]) return where + "block " + std::to_string(i) + " differs";
    }
  }
  return "";
}

void expect_same_views(const PagedKvCache& cache, SeqId seq, int64_t limit) {
  const StorageDtype dtype = cache.manager().config().base_dtype;
  StepViews views(cache);
  const int64_t base = views.add_base(seq, limit);
  EXPECT_EQ(views.add_base(seq, limit), base) << "one read per (sequence, limit)";
  const int64_t residual = views.add_residual(base, agent_v_stream(dtype));
  views.finish();
  const CacheLayout& l = cache.layout();
  const std::vector<float> b(static_cast<size_t>(l.num_kv_heads * test::kViewRank * l.head_dim), 0.5f);
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    const BaseLayerView per_layer = BaseLayerView::of(cache, seq, layer, limit);
    const kernels::PagedRows ours = views.base_rows(base, layer), theirs = per_layer.rows();
    EXPECT_EQ(ours.heads_per_lane, theirs.heads_per_lane);
    EXPECT_EQ(ours.storage->k, theirs.storage->k);
    EXPECT_EQ(ours.storage->positions, theirs.storage->positions);
    EXPECT_EQ(compare_lanes(ours.lanes, theirs.lanes, l.num_groups(), l.block_size), "") << "layer " << layer;
    const ResidualLayerView r = ResidualLayerView::of(cache, seq, agent_v_stream(dtype), layer, limit);
    ASSERT_EQ(views.residual_rank(residual, layer), r.rank()) << "layer " << layer;
    if (r.rank() == 0) continue;
    const kernels::LowRankStream s = views.residual_stream(residual, layer, b.data(), r.rank() * l.head_dim, l.head_dim);
    const kernels::LowRankStream t = r.stream(b.data(), r.rank() * l.head_dim, l.head_dim);
    EXPECT_EQ(s.rank, t.rank);
    EXPECT_EQ(s.c_storage->k, t.c_storage->k);
    EXPECT_EQ(compare_lanes(s.c_lanes, t.c_lanes, l.num_groups(), l.block_size), "") << "C, layer " << layer;
  }
}

TEST(StepViews, EqualThePerLayerViews) {
  at::manual_seed(3);
  for (int64_t heads_per_group : {int64_t{1}, test::kViewKvHeads}) {
    PagedKvCache cache(views_config(heads_per_group, StorageDtype::kFloat32));
    cache.create_sequence(SeqId(1), ContentKey::base(StorageDtype::kFloat32));
    cache.attach_residual(SeqId(1), agent_v_stream(StorageDtype::kFloat32), {test::kViewRank, 0}, {});
    append_random(cache, SeqId(1), 37, {agent_v_stream(StorageDtype::kFloat32)});
    expect_same_views(cache, SeqId(1), BaseLayerView::kAllPositions);
    expect_same_views(cache, SeqId(1), 20);  // a reader that began its reply at position 20
    if (heads_per_group == 1) {
      // Per-head lanes keep different rows after compaction.
      KeepSets keep;
      for (int64_t lane = 0; lane < cache.layout().num_lanes(); ++lane) {
        std::vector<int64_t>& k = keep.emplace_back();
        for (int64_t row = 0; row < 37; ++row) {
          if ((row + lane) % 3 != 0) k.push_back(row);
        }
      }
      ASSERT_TRUE(cache.compact(SeqId(1), keep));
      expect_same_views(cache, SeqId(1), BaseLayerView::kAllPositions);
      expect_same_views(cache, SeqId(1), 30);
    }
  }
}

TEST(StepViews, PrivateRowsCarryTheirPositions) {
  at::manual_seed(4);
  PagedKvCache cache(views_config(test::kViewKvHeads, StorageDtype::kFloat32));
  cache.create_suffix_sequence(SeqId(2), ContentKey::base(StorageDtype::kFloat32), 100);
  append_random(cache, SeqId(2), 5, {});
  StepViews views(cache);
  const int64_t rows = views.add_base(SeqId(2));
  views.finish();
  const kernels::PagedRows r = views.base_rows(rows, 1);
  EXPECT_EQ(r.lanes[0].num_rows, 5);
  EXPECT_EQ(r.lanes[0].max_rope_position, 104);
}

TEST(StepViews, BadReadsAreRefused) {
  PagedKvCache cache(views_config(test::kViewKvHeads, StorageDtype::kFloat32));
  cache.create_sequence(SeqId(1), ContentKey::base(StorageDtype::kFloat32));
  cache.attach_residual(SeqId(1), agent_v_stream(StorageDtype::kFloat32), {test::kViewRank, test::kViewRank}, {});
  append_random(cache, SeqId(1), 9, {});  // base rows only: the stream has no C rows yet
  StepViews views(cache);
  EXPECT_THROW(views.add_base(SeqId(7)), InvalidArgumentError);
  const int64_t base = views.add_base(SeqId(1));
  try {
    views.add_residual(base, agent_v_stream(StorageDtype::kFloat32));
    ADD_FAILURE() << "no error for a stream without C rows";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("append its rows before attending"), std::string::npos) << e.what();
  }
  EXPECT_THROW(views.add_residual(base, ContentKey::residual(StreamKind::kResidualK, StorageDtype::kFloat32,
                                                              AdapterIdentity::base_model())),
               InvalidArgumentError);
}

}  // namespace
}  // namespace lorakv::cache
