// tests/cache/int8_pool_test.cpp: the int8 base pool. Rows come back within half a
// quantisation step of what was written, with the scale max |x| / 127 per row and KV head;
// scales move with their rows when compaction packs them and when copy-on-write copies a
// block; stored rows and scales round-trip unchanged (a save); bytes count the scales;
// residual pools refuse int8.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "lorakv/cache/block_pool.h"
#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache {
namespace {

const AdapterIdentity kWriter{7, 7};

BlockPoolSpec int8_spec(int64_t blocks = 8) {
  BlockPoolSpec s;
  s.num_blocks = blocks;
  s.block_size = 4;
  s.row_shape = {3, 64};  // heads_per_group, head_dim
  s.dtype = StorageDtype::kInt8;
  s.base = true;
  return s;
}

TEST(Int8Pool, RowsComeBackWithinHalfAStepOfTheirScale) {
  at::manual_seed(11);
  BlockPool pool(int8_spec());
  // Rows of very different magnitudes, one all zero, one with a single large outlier.
  at::Tensor k = at::randn({6, 3, 64}) * at::tensor({1e-3f, 1.f, 30.f, 0.f, 1.f, 1.f}).view({6, 1, 1});
  k[5][1][17] = 500.f;
  const at::Tensor v = at::randn({6, 3, 64});
  const at::Tensor slots = at::tensor({9L, 0L, 31L, 4L, 12L, 13L});
  pool.write(slots, k, v);
  const at::Tensor got = pool.gather_a(slots);
  ASSERT_EQ(got.scalar_type(), at::kFloat);
  const Int8Rows stored = pool.gather_a_int8(slots);
  EXPECT_TRUE(at::equal(stored.scales, k.abs().amax(-1) / 127.0f)) << "scale per row and head: max |x| / 127";
  const at::Tensor step = stored.scales.unsqueeze(-1);
  // Round to nearest: at most half a step off (a float32 ulp of slack for x / scale).
  EXPECT_TRUE(((got - k).abs() <= step * (0.5f + 1e-5f)).all().item<bool>());
  EXPECT_TRUE(at::equal(got[3], at::zeros({3, 64}))) << "an all-zero row reads as zeros, not NaN";
  EXPECT_EQ(stored.values.abs().amax().item<int>(), 127) << "the largest value of a row maps to +-127";
  EXPECT_NEAR(got[5][1][17].item<float>(), 500.f, 500.f / 127 / 2);
  // What the kernel reads is values times scale: gather_a is exactly that.
  EXPECT_TRUE(at::equal(got, dequantize_int8(stored.values, stored.scales)));
  EXPECT_TRUE(((pool.gather_b(slots) - v).abs() <= pool.gather_b_int8(slots).scales.unsqueeze(-1) * 0.50001f).all().item<bool>());
}

// A row with one outlier channel: plain int8 spends its 255 steps on the outlier and rounds
// every other value by up to outlier / 254; rotated first, the outlier's energy spreads over
// the row and the error of the rest drops. Rows read back in their own frame (H = H^-1).
TEST(Int8Pool, HadamardRotationSpreadsAnOutlier) {
  at::manual_seed(21);
  BlockPoolSpec spec = int8_spec();
  BlockPool plain(spec);
  spec.hadamard = true;
  BlockPool rotated(spec);
  at::Tensor k = at::randn({8, 3, 64});
  k.select(2, 5).fill_(60.f);  // one channel far above the others, as attention keys have
  const at::Tensor slots = at::arange(8, at::kLong);
  plain.write(slots, k, k);
  rotated.write(slots, k, k);
  const at::Tensor h = hadamard_matrix(64);
  EXPECT_TRUE(at::allclose(at::matmul(h, h), at::eye(64), 0, 1e-6)) << "H is orthonormal and its own inverse";
  const double plain_error = (plain.gather_a(slots) - k).abs().mean().item<double>();
  const double rotated_error = (rotated.gather_a(slots) - k).abs().mean().item<double>();
  EXPECT_LT(rotated_error, plain_error / 3) << "plain " << plain_error << ", rotated " << rotated_error;
  // Stored rotated: the int8 rows differ from plain ones; the scale is that of H x.
  EXPECT_FALSE(at::equal(rotated.gather_a_int8(slots).values, plain.gather_a_int8(slots).values));
  EXPECT_TRUE(at::allclose(rotated.gather_a_int8(slots).scales, at::matmul(k, h).abs().amax(-1) / 127, 1e-5, 1e-6));
}

TEST(Int8Pool, StoredRowsAndScalesRoundTripUnchanged) {
  at::manual_seed(12);
  BlockPool a(int8_spec()), b(int8_spec());
  const at::Tensor slots = at::tensor({3L, 5L, 20L});
  a.write(slots, at::randn({3, 3, 64}), at::randn({3, 3, 64}));
  b.write_int8(at::tensor({0L, 1L, 2L}), a.gather_a_int8(slots), a.gather_b_int8(slots));
  EXPECT_TRUE(at::equal(b.gather_a(at::tensor({0L, 1L, 2L})), a.gather_a(slots)));
  EXPECT_TRUE(at::equal(b.gather_b(at::tensor({0L, 1L, 2L})), a.gather_b(slots)));
  // Bad input: float rows to write_int8, scales of another shape.
  const Int8Rows good = a.gather_a_int8(slots);
  EXPECT_THROW(b.write_int8(slots, {good.values.to(at::kFloat), good.scales}, good), InvalidArgumentError);
  EXPECT_THROW(b.write_int8(slots, {good.values, good.scales.narrow(1, 0, 2)}, good), InvalidArgumentError);
}

TEST(Int8Pool, BytesCountTheScales) {
  BlockPool pool(int8_spec());
  // Per block: 4 rows x 3 heads x (64 int8 + a float32 scale) for K and for V, an int32 position per row.
  EXPECT_EQ(pool.a_bytes_per_block(), 4 * 3 * (64 + 4));
  EXPECT_EQ(pool.b_bytes_per_block(), 4 * 3 * (64 + 4));
  EXPECT_EQ(pool.block_bytes(), 2 * 4 * 3 * (64 + 4) + 4 * 4);
}

TEST(Int8Pool, ResidualPoolsRefuseInt8) {
  CacheConfig c;
  c.layout = {2, 3, 64, 4, 3};
  c.base_dtype = StorageDtype::kInt8;
  c.residual_dtype = StorageDtype::kInt8;
  c.num_base_blocks = 16;
  EXPECT_THROW(PagedKvCache{c}, InvalidArgumentError);
}

// A cache of 2 layers x 3 KV heads (one lane per head), int8 base, holding 19 rows.
PagedKvCache filled(std::vector<at::Tensor>* k_written) {
  CacheConfig c;
  c.layout = {2, 3, 64, 4, 1};
  c.base_dtype = StorageDtype::kInt8;
  c.num_base_blocks = 64;
  PagedKvCache cache(c);
  cache.create_sequence(SeqId(1), ContentKey::base(StorageDtype::kInt8));
  std::vector<int32_t> tokens(19);
  std::iota(tokens.begin(), tokens.end(), 5);
  const std::optional<AppendSlots> slots = cache.append(SeqId(1), {tokens, kWriter, {}});
  EXPECT_TRUE(slots.has_value());
  for (int64_t layer = 0; layer < 2; ++layer) {
    k_written->push_back(at::randn({19, 3, 64}) * (layer + 1));
    cache.write_base(*slots, layer, k_written->back(), at::randn({19, 3, 64}));
  }
  return cache;
}

TEST(Int8Pool, ScalesMoveWithTheirRowsWhenCompactionPacksThem) {
  at::manual_seed(13);
  std::vector<at::Tensor> written;
  PagedKvCache cache = filled(&written);
  const CacheLayout& l = cache.layout();
  // What each lane reads before: per lane, rows by position.
  std::vector<GatheredRows> before;
  for (int64_t lane = 0; lane < l.num_lanes(); ++lane) before.push_back(cache.gather_lane(SeqId(1), l.layer_of(lane), lane % 3));
  std::mt19937 rng(14);
  KeepSets keep(static_cast<size_t>(l.num_lanes()));
  for (std::vector<int64_t>& lane : keep) {
    for (int64_t row = 0; row < 19; ++row) {
      if (rng() % 10 < 5 || row == 18) lane.push_back(row);
    }
  }
  ASSERT_TRUE(cache.compact(SeqId(1), keep));
  for (int64_t lane = 0; lane < l.num_lanes(); ++lane) {
    const GatheredRows after = cache.gather_lane(SeqId(1), l.layer_of(lane), lane % 3);
    const at::Tensor kept = at::tensor(keep[static_cast<size_t>(lane)]);
    ASSERT_TRUE(at::equal(after.positions, before[static_cast<size_t>(lane)].positions.index_select(0, kept)));
    // Bit for bit: a scale left behind would scale the moved row by another row's scale.
    EXPECT_TRUE(at::equal(after.k, before[static_cast<size_t>(lane)].k.index_select(1, kept))) << "lane " << lane;
    EXPECT_TRUE(at::equal(after.v, before[static_cast<size_t>(lane)].v.index_select(1, kept))) << "lane " << lane;
  }
}

TEST(Int8Pool, ScalesAreCopiedWithTheBlockOnCopyOnWrite) {
  at::manual_seed(15);
  std::vector<at::Tensor> written;
  PagedKvCache cache = filled(&written);
  cache.fork(SeqId(1), SeqId(2));
  // The fork appends into the shared partial last block: copy-on-write copies it first.
  const std::optional<AppendSlots> slots = cache.append(SeqId(2), {{99}, kWriter, {}});
  ASSERT_TRUE(slots.has_value());
  ASSERT_FALSE(slots->ops.copies.empty()) << "the append should copy the shared partial block";
  for (int64_t layer = 0; layer < 2; ++layer) cache.write_base(*slots, layer, at::randn({1, 3, 64}), at::randn({1, 3, 64}));
  for (int64_t layer = 0; layer < 2; ++layer) {
    const GatheredRows a = cache.gather_layer(SeqId(1), layer), b = cache.gather_layer(SeqId(2), layer);
    EXPECT_TRUE(at::equal(b.k.narrow(1, 0, 19), a.k)) << "layer " << layer;
    EXPECT_TRUE(at::equal(b.v.narrow(1, 0, 19), a.v)) << "layer " << layer;
  }
}

}  // namespace
}  // namespace lorakv::cache
