// tests/runtime/kernels_test.cpp: attention against the naive reference (GQA ratios, rows
// in shuffled order with their positions), RoPE against its definition, and the
// contiguous KV cache's bookkeeping.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/rope.h"
#include "runtime/kv_cache.h"
#include "tests/reference/attention_reference.h"

namespace lorakv {
namespace {

TEST(Attention, MatchesNaiveReferenceAcrossGqaRatiosAndShuffledRows) {
  at::manual_seed(0);
  for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 4}, {6, 2}, {9, 3}, {4, 1}}) {
    const int64_t dim = 16, tk = 13, tq = 5;
    at::Tensor q = at::randn({tq, heads, dim});
    at::Tensor k = at::randn({kv_heads, tk, dim});
    at::Tensor v = at::randn({kv_heads, tk, dim});
    // Keys stored out of order: the mask must follow positions, not row indices.
    at::Tensor k_pos = at::randperm(tk, at::kLong);
    at::Tensor q_pos = at::arange(tk - tq, tk, at::kLong);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
    at::Tensor ours = kernels::causal_attention({q, k, v, q_pos, k_pos, scale});
    at::Tensor ref = reference::naive_causal_attention(q, k, v, q_pos, k_pos, scale);
    // float32 against double: softmax and 13-term sums keep errors near 1e-6.
    EXPECT_TRUE(at::allclose(ours, ref, 1e-5, 1e-5)) << heads << "/" << kv_heads << " max diff "
                                                      << (ours - ref).abs().max().item<double>();
  }
}

TEST(Rope, RotatesHalvesByPositionTimesFrequency) {
  const int64_t dim = 8;
  at::Tensor inv_freq = kernels::rope_inv_freq(dim, 10000.0);
  at::Tensor positions = at::tensor({0, 3, 17}, at::kLong);
  auto [cos, sin] = kernels::rope_cos_sin(positions, inv_freq);
  at::Tensor x = at::randn({3, 2, dim});
  at::Tensor y = kernels::apply_rope(x, cos, sin);
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double angle = static_cast<double>(positions[t].item<int64_t>()) * std::pow(10000.0, -2.0 * i / dim);
      const double a = x[t][1][i].item<double>(), b = x[t][1][i + dim / 2].item<double>();
      EXPECT_NEAR(y[t][1][i].item<double>(), a * std::cos(angle) - b * std::sin(angle), 1e-5);
      EXPECT_NEAR(y[t][1][i + dim / 2].item<double>(), b * std::cos(angle) + a * std::sin(angle), 1e-5);
    }
  }
  EXPECT_TRUE(at::allclose(y[0], x[0]));  // position 0 is the identity
}

TEST(ContiguousKvCache, AppendsCommitsGrowsAndReleases) {
  runtime::ContiguousKvCache cache(/*num_layers=*/2, /*num_kv_heads=*/3, /*head_dim=*/4);
  const SeqId a(1), b(2);
  EXPECT_EQ(cache.length(a), 0);
  for (int step = 0; step < 40; ++step) {  // 40 * 3 rows: crosses the 64-row initial capacity
    for (int64_t layer = 0; layer < 2; ++layer) {
      at::Tensor k = at::full({3, 3, 4}, static_cast<float>(step));
      cache.append(a, layer, k, k + 0.5, at::arange(step * 3, step * 3 + 3, at::kLong));
    }
    EXPECT_EQ(cache.length(a), step * 3);  // appended rows count only after commit
    cache.commit(a);
  }
  EXPECT_EQ(cache.length(a), 120);
  runtime::KvView view = cache.view(a, 1);
  EXPECT_EQ(view.k.sizes(), (at::IntArrayRef{3, 120, 4}));
  EXPECT_EQ(view.k[2][119][3].item<float>(), 39.0f);
  EXPECT_EQ(view.v[0][0][0].item<float>(), 0.5f);
  EXPECT_EQ(view.positions[77].item<int64_t>(), 77);
  EXPECT_EQ(cache.length(b), 0);
  const int64_t bytes = cache.allocated_bytes();
  EXPECT_GT(bytes, 0);
  cache.release(a);
  EXPECT_EQ(cache.length(a), 0);
  EXPECT_EQ(cache.allocated_bytes(), 0);
}

}  // namespace
}  // namespace lorakv
