// tests/cache/cache_stats_test.cpp: bytes measured from the pools against a closed form
// derived here from the shapes, for several layouts, dtypes and rank patterns, before and
// after per-head eviction; plus the peak and block counts.
#include <gtest/gtest.h>

#include <random>

#include "lorakv/cache/paged_kv_cache.h"

namespace lorakv::cache {
namespace {

struct Shape {
  int64_t layers, kv_heads, head_dim, block_size, heads_per_group;
  StorageDtype dtype;
  std::vector<int64_t> ranks_a, ranks_b;  // per layer; 0 = not adapted
  int64_t tokens, covered_b;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(CacheStats, MeasuredBytesMatchTheClosedForm) {
  const std::vector<Shape> shapes = {
      {2, 3, 4, 4, 1, StorageDtype::kFloat32, {2, 3}, {3, 0}, 13, 6},
      {3, 2, 8, 16, 2, StorageDtype::kBFloat16, {8, 8, 8}, {4, 8, 4}, 37, 37},
      {4, 4, 16, 8, 1, StorageDtype::kBFloat16, {8, 0, 16, 8}, {16, 16, 16, 16}, 64, 20},
      {1, 1, 64, 16, 1, StorageDtype::kFloat32, {8}, {8}, 1, 1},
  };
  const AdapterIdentity a{sha256("adapter a")}, b{sha256("adapter b")};
  for (const Shape& sh : shapes) {
    SCOPED_TRACE("layers " + std::to_string(sh.layers) + " heads " + std::to_string(sh.kv_heads));
    CacheConfig c;
    c.layout = {sh.layers, sh.kv_heads, sh.head_dim, sh.block_size, sh.heads_per_group};
    c.base_dtype = c.residual_dtype = sh.dtype;
    c.num_base_blocks = 4096;
    for (int64_t r : {4, 8, 16, 2, 3}) c.residual_pools.push_back({r, 1024});
    PagedKvCache cache(c);
    const ContentKey ra = ContentKey::residual(StreamKind::kResidualV, sh.dtype, a);
    const ContentKey rb = ContentKey::residual(StreamKind::kResidualV, sh.dtype, b);
    cache.create_sequence(SeqId(1), ContentKey::base(sh.dtype));
    cache.attach_residual(SeqId(1), ra, sh.ranks_a, {});
    cache.attach_residual(SeqId(1), rb, sh.ranks_b, {});
    std::vector<int32_t> tokens(static_cast<size_t>(sh.tokens), 5);
    ASSERT_TRUE(cache.append(SeqId(1), {tokens, a, {{ra, sh.tokens}, {rb, sh.covered_b}}}));

    const int64_t elt = sh.dtype == StorageDtype::kFloat32 ? 4 : 2;
    const int64_t groups = sh.kv_heads / sh.heads_per_group;
    const int64_t lanes = sh.layers * groups;
    const int64_t rows_alloc = ceil_div(sh.tokens, sh.block_size) * sh.block_size;
    auto residual_bytes = [&](const std::vector<int64_t>& ranks, int64_t covered) {
      int64_t bytes = 0;
      for (int64_t r : ranks) bytes += groups * ceil_div(covered, sh.block_size) * sh.block_size * r * elt;
      return bytes;
    };
    CacheStats s = cache.stats();
    EXPECT_EQ(s.base_k_bytes, lanes * rows_alloc * sh.heads_per_group * sh.head_dim * elt);
    EXPECT_EQ(s.base_v_bytes, s.base_k_bytes);
    EXPECT_EQ(s.positions_bytes, lanes * rows_alloc * 4);  // int32 per row
    EXPECT_EQ(s.residual_bytes[a], residual_bytes(sh.ranks_a, sh.tokens));
    EXPECT_EQ(s.residual_bytes[b], residual_bytes(sh.ranks_b, sh.covered_b));
    EXPECT_EQ(s.residual_bytes_total, s.residual_bytes[a] + s.residual_bytes[b]);
    EXPECT_EQ(s.bytes_in_use, 2 * s.base_k_bytes + s.positions_bytes + s.residual_bytes_total);
    // Within block rounding of the per-token figure L x Hkv x N x D x bytes.
    const int64_t exact_k = sh.layers * sh.kv_heads * sh.tokens * sh.head_dim * elt;
    EXPECT_GE(s.base_k_bytes, exact_k);
    EXPECT_LT(s.base_k_bytes - exact_k, lanes * sh.block_size * sh.heads_per_group * sh.head_dim * elt);
    EXPECT_EQ(s.pools[0].blocks_used, lanes * ceil_div(sh.tokens, sh.block_size));
    EXPECT_EQ(s.pools[0].blocks_used + s.pools[0].blocks_cached + s.pools[0].blocks_free, 4096);
    EXPECT_GT(s.metadata_bytes, 0);

    // Per-lane eviction: bytes drop to the closed form of what each lane keeps.
    std::mt19937 rng(static_cast<unsigned>(sh.tokens));
    KeepSets keep(static_cast<size_t>(lanes));
    int64_t base_rows = 0, res_a = 0, res_b = 0;
    for (int64_t lane = 0; lane < lanes; ++lane) {
      auto& k = keep[static_cast<size_t>(lane)];
      for (int64_t row = 0; row < sh.tokens; ++row) {
        if (rng() % 3 == 0) k.push_back(row);
      }
      const int64_t layer = lane / groups;
      const auto n = static_cast<int64_t>(k.size());
      const auto nb = static_cast<int64_t>(std::lower_bound(k.begin(), k.end(), sh.covered_b) - k.begin());
      base_rows += ceil_div(n, sh.block_size) * sh.block_size;
      res_a += ceil_div(n, sh.block_size) * sh.block_size * sh.ranks_a[static_cast<size_t>(layer)] * elt;
      res_b += ceil_div(nb, sh.block_size) * sh.block_size * sh.ranks_b[static_cast<size_t>(layer)] * elt;
    }
    const int64_t peak = s.bytes_in_use;
    ASSERT_TRUE(cache.compact(SeqId(1), keep));
    s = cache.stats();
    EXPECT_EQ(s.base_k_bytes, base_rows * sh.heads_per_group * sh.head_dim * elt);
    EXPECT_EQ(s.positions_bytes, base_rows * 4);
    EXPECT_EQ(s.residual_bytes[a], res_a);
    EXPECT_EQ(s.residual_bytes[b], res_b);
    EXPECT_EQ(s.peak_bytes_in_use, peak);
    cache.release(SeqId(1));
    s = cache.stats();
    EXPECT_EQ(s.bytes_in_use, 0);
    // Every pool byte is in use, cached (still findable by prefix) or free.
    EXPECT_EQ(s.cached_bytes + s.free_bytes, s.reserved_bytes);
    EXPECT_EQ(s.residual_bytes_total, 0);
    EXPECT_EQ(s.peak_bytes_in_use, peak);
  }
}

}  // namespace
}  // namespace lorakv::cache
