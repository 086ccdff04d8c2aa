// tests/runtime/kernels_test.cpp: attention against the naive reference (GQA ratios, rows
// in shuffled order with their positions), RoPE against its definition, the contiguous
// KV cache's bookkeeping, and bad shapes into the kernels' entry points as
// InvalidArgumentError (never a libtorch error, never a silent broadcast).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/kernels/attention.h"
#include "lorakv/kernels/lora.h"
#include "lorakv/kernels/rope.h"
#include "lorakv/runtime/kv_cache.h"
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

// x [4, 6] and out [4, 5] with rank-2 factors.
struct LoraCase {
  at::Tensor x = at::randn({4, 6});
  at::Tensor out = at::zeros({4, 5});
  at::Tensor a = at::randn({2, 6});  // [r, in]
  at::Tensor b = at::randn({5, 2});  // [out, r]
  kernels::LoraSegment range(int64_t begin, int64_t length) const { return {{begin, length, {}}, a, b}; }
  kernels::LoraSegment indices(std::vector<int64_t> rows) const {
    return {{0, 0, at::tensor(rows, at::kLong)}, a, b};
  }
};

// The message of the InvalidArgumentError `fn` throws, or "" when it throws none.
template <typename Fn>
std::string invalid_argument_of(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

TEST(LoraAdd, BadShapesAreInvalidArgumentErrors) {
  LoraCase c;
  auto call = [&](at::Tensor out, const at::Tensor& x, std::vector<kernels::LoraSegment> segments) {
    return invalid_argument_of([&] { kernels::lora_add(out, x, segments); });
  };
  EXPECT_EQ(call(c.out, c.x, {c.range(0, 4)}), "");  // the well-formed call passes
  EXPECT_NE(call(c.out, c.x.view({24}), {c.range(0, 4)}), "");     // x not [T, in]
  EXPECT_NE(call(at::zeros({3, 5}), c.x, {c.range(0, 3)}), "");    // out rows differ
  EXPECT_NE(call(c.out.to(at::kDouble), c.x, {c.range(0, 4)}), "");  // out dtype differs
  kernels::LoraSegment wide_a = c.range(0, 4);
  wide_a.a = at::randn({2, 7});
  EXPECT_NE(call(c.out, c.x, {wide_a}), "");
  kernels::LoraSegment wide_b = c.range(0, 4);
  wide_b.b = at::randn({6, 2});
  EXPECT_NE(call(c.out, c.x, {wide_b}), "");
  kernels::LoraSegment ranks_differ = c.range(0, 4);
  ranks_differ.b = at::randn({5, 3});
  EXPECT_NE(call(c.out, c.x, {ranks_differ}), "");
  kernels::LoraSegment flat_a = c.range(0, 4);
  flat_a.a = at::randn({12});
  EXPECT_NE(call(c.out, c.x, {flat_a}), "");
  kernels::LoraSegment missing_b = c.range(0, 4);
  missing_b.b = at::Tensor();
  EXPECT_NE(call(c.out, c.x, {missing_b}), "");
  kernels::LoraSegment bf16 = c.range(0, 4);
  bf16.a = bf16.a.to(at::kBFloat16);
  bf16.b = bf16.b.to(at::kBFloat16);
  const std::string dtype_message = call(c.out, c.x, {bf16});
  EXPECT_NE(dtype_message.find("BFloat16"), std::string::npos) << dtype_message;
  const std::string shape_message = call(c.out, c.x, {wide_a});
  EXPECT_NE(shape_message.find("lora_add: A [r, 6] and B [5, r] expected, got [2, 7] and [5, 2]"), std::string::npos)
      << shape_message;
}

TEST(LoraAdd, RowsOutsideTheBatchAreInvalidArgumentErrors) {
  LoraCase c;
  auto call = [&](std::vector<kernels::LoraSegment> segments) {
    return invalid_argument_of([&] { kernels::lora_add(c.out, c.x, segments); });
  };
  EXPECT_EQ(call({c.range(1, 3), c.indices({0})}), "");
  EXPECT_NE(call({c.range(2, 3)}), "");   // [2, 5) past 4 rows
  EXPECT_NE(call({c.range(-1, 2)}), "");
  EXPECT_NE(call({c.indices({0, 4})}), "");  // index 4 of 4 rows
  EXPECT_NE(call({c.indices({-1})}), "");
  kernels::LoraSegment int_rows = c.indices({0});
  int_rows.rows.rows = int_rows.rows.rows.to(at::kInt);
  EXPECT_NE(call({int_rows}), "");
  // Decode-shaped batches take the gathered path (3+ segments, one rank, few rows each).
  EXPECT_EQ(call({c.indices({0}), c.indices({1}), c.indices({2})}), "");
  EXPECT_NE(call({c.indices({0}), c.indices({1}), c.indices({7})}), "");
  kernels::LoraSegment wide = c.indices({2});
  wide.a = at::randn({2, 7});
  EXPECT_NE(call({c.indices({0}), c.indices({1}), wide}), "");
}

// The decode path of a mixed batch (one row per adapter) keeps its stacked factors across
// calls: the same adapters hit the cache (no new stack), another set misses, and the
// result equals each row's x A^T B^T computed directly, also into a column view of a wider
// output (the fused q|k|v projection's layout).
TEST(LoraAdd, StacksAreKeptAcrossCallsAndRowsMatchTheirOwnAdapter) {
  at::manual_seed(11);
  const int64_t n = 4, in = 40, out_dim = 24, rank = 8;
  const at::Tensor x = at::randn({n, in});
  std::vector<at::Tensor> as, bs;
  std::vector<kernels::LoraSegment> segments;
  for (int64_t i = 0; i < n; ++i) {
    as.push_back(at::randn({rank, in}));
    bs.push_back(at::randn({out_dim, rank}));
    segments.push_back({{0, 0, at::tensor(std::vector<int64_t>{n - 1 - i}, at::kLong)}, as.back(), bs.back()});
  }
  kernels::LoraStackCache cache;
  at::Tensor wide = at::zeros({n, out_dim + 10});
  at::Tensor columns = wide.narrow(1, 5, out_dim);
  kernels::lora_add(columns, x, segments, &cache);
  kernels::lora_add(columns, x, segments, &cache);  // twice: the update is applied twice
  EXPECT_EQ(cache.builds(), 1);
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor expected = at::matmul(at::matmul(x[n - 1 - i], as[i].t()), bs[i].t()) * 2;
    EXPECT_TRUE(at::allclose(columns[n - 1 - i], expected, 1e-4, 1e-4)) << "row " << n - 1 - i;
  }
  EXPECT_EQ(wide.narrow(1, 0, 5).abs().sum().item<float>(), 0.0f);  // nothing outside the view
  std::vector<kernels::LoraSegment> other = segments;
  std::swap(other[0].a, other[1].a);
  kernels::lora_add(columns, x, other, &cache);
  EXPECT_EQ(cache.builds(), 2);
}

TEST(Attention, BadShapesAreInvalidArgumentErrors) {
  const int64_t dim = 8;
  const at::Tensor q = at::randn({3, 4, dim}), k = at::randn({2, 5, dim}), v = at::randn({2, 5, dim});
  const at::Tensor q_pos = at::arange(2, 5, at::kLong), k_pos = at::arange(5, at::kLong);
  auto call = [&](kernels::AttentionInput in) {
    in.scale = 0.3;
    return invalid_argument_of([&] { kernels::causal_attention(in); });
  };
  EXPECT_EQ(call({q, k, v, q_pos, k_pos}), "");
  EXPECT_NE(call({q.view({3, 4 * dim}), k, v, q_pos, k_pos}), "");
  EXPECT_NE(call({at::randn({3, 3, dim}), k, v, q_pos, k_pos}), "");  // 3 heads over 2 KV heads
  EXPECT_NE(call({q, at::randn({2, 5, dim + 1}), at::randn({2, 5, dim + 1}), q_pos, k_pos}), "");
  EXPECT_NE(call({q, k, at::randn({2, 4, dim}), q_pos, k_pos}), "");
  EXPECT_NE(call({q, k, v, at::arange(2, at::kLong), k_pos}), "");
  EXPECT_NE(call({q, k, v, q_pos, at::arange(5, at::kInt)}), "");
  EXPECT_NE(call({q, k.to(at::kBFloat16), v.to(at::kBFloat16), q_pos, k_pos}), "");
  EXPECT_NE(call({q, at::randn({0, 5, dim}), at::randn({0, 5, dim}), q_pos, k_pos}), "");  // no KV heads
  kernels::AttentionInput negative{q, k, v, q_pos, k_pos};
  negative.window = -1;
  EXPECT_NE(call(negative), "");
}

TEST(Rope, BadShapesAreInvalidArgumentErrors) {
  const at::Tensor inv_freq = kernels::rope_inv_freq(8, 10000.0);
  auto [cos, sin] = kernels::rope_cos_sin(at::arange(3, at::kLong), inv_freq);  // [3, 8]
  const at::Tensor x = at::randn({3, 2, 8});
  EXPECT_EQ(invalid_argument_of([&] { kernels::apply_rope(x, cos, sin); }), "");
  EXPECT_NE(invalid_argument_of([&] { kernels::apply_rope(x.view({3, 16}), cos, sin); }), "");
  EXPECT_NE(invalid_argument_of([&] { kernels::apply_rope(at::randn({4, 2, 8}), cos, sin); }), "");
  EXPECT_NE(invalid_argument_of([&] { kernels::apply_rope(at::randn({3, 2, 6}), cos, sin); }), "");
  EXPECT_NE(invalid_argument_of([&] { kernels::apply_rope(at::randn({1, 2, 8}), cos.narrow(0, 0, 1), sin); }), "");
  EXPECT_NE(invalid_argument_of([&] { kernels::rope_inv_freq(7, 10000.0); }), "");
  EXPECT_NE(invalid_argument_of([&] { kernels::rope_inv_freq(0, 10000.0); }), "");
  EXPECT_NE(invalid_argument_of([&] { kernels::rope_cos_sin(at::zeros({3, 1}, at::kLong), inv_freq); }), "");
}

TEST(RmsNorm, WeightOfAnotherSizeIsAnInvalidArgumentError) {
  const at::Tensor x = at::randn({3, 6});
  EXPECT_EQ(invalid_argument_of([&] { kernels::rms_norm(x, at::ones({6}), 1e-6); }), "");
  // A [1] weight would broadcast silently without the check.
  EXPECT_NE(invalid_argument_of([&] { kernels::rms_norm(x, at::ones({1}), 1e-6); }), "");
  EXPECT_NE(invalid_argument_of([&] { kernels::rms_norm(x, at::ones({5}), 1e-6); }), "");
  EXPECT_NE(invalid_argument_of([&] { kernels::rms_norm(x, at::ones({1, 6}), 1e-6); }), "");
}

}  // namespace
}  // namespace lorakv
