// tests/runtime/engine_capkv_test.cpp: capkv in the engine, on the tiny model
// (tests/runtime/tiny_engine_model.h: 2 layers, 2 query heads of 32 on 1 KV head).
//   - capkv_scores and capkv_anchor equal the formula written out in double precision
//     (tests/reference/capkv_reference.h) on random data;
//   - the anchor the engine sums over a chunked prefill is the mean query before RoPE taken
//     directly from one unchunked forward (a recording attention backend, RoPE undone with
//     angles computed here), over the positions from `sinks` on; only the writer's queries
//     enter it, forks and export/import carry it;
//   - an eviction keeps the sinks, the window and the rows the reference ranks highest.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/eviction_scores.h"
#include "tests/reference/attention_reference.h"
#include "tests/reference/capkv_reference.h"
#include "tests/runtime/tiny_engine_model.h"

namespace lorakv::runtime {
namespace {

constexpr int64_t kSinks = 2;

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 48);
  return t;
}

cache::eviction::EvictionConfig capkv(int64_t budget) {
  cache::eviction::EvictionConfig c;
  c.policy = "capkv";
  c.budget_tokens = budget;
  c.sinks = kSinks;
  c.window = 4;
  return c;
}

EngineOptions pools(int64_t chunk) {
  EngineOptions eo;
  eo.base_rows = 1024;
  eo.residual_rows = 1024;
  eo.block_size = 16;
  eo.prefill_chunk = chunk;
  return eo;
}

// The largest |a - b| over the largest |b|.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor bd = b.to(at::kDouble);
  return (a.to(at::kDouble) - bd).abs().max().item<double>() / bd.abs().max().item<double>();
}

// The float32 route (eviction_scores.cpp: normalise, one batched solve of A per head) against
// the double one. Errors: the cosines and weights are within a few float32 ulps; the solve's
// relative error is bounded by cond(A) times a few ulps, and cond(A) <= 1 + sum_j (w_j + eps)
// |v_j|^2, about 1e2 for these 60 rows of 16 unit-variance values (w <= 1): at most ~1e-5.
// Measured: 1.8e-7 (tau 5), 5.1e-7 (tau 20) of the largest score; 1e-5 is allowed. Shifting
// by the max over all heads instead of each query head's moved them by 6.5e-2 (tau 5).
TEST(CapKvScores, EqualTheFormulaWrittenOut) {
  at::manual_seed(7);
  const int64_t kv_heads = 2, group = 3, n = 60, d = 16;
  const at::Tensor keys = at::randn({kv_heads, n, d}, at::kFloat);
  const at::Tensor values = at::randn({kv_heads, n, d}, at::kFloat);
  const at::Tensor anchor = at::randn({kv_heads * group, d}, at::kFloat);
  for (double tau : {5.0, 0.0, 20.0}) {
    const at::Tensor got = capkv_scores(keys, values, anchor, tau);  // float32 [kv_heads, n]
    ASSERT_EQ(got.sizes(), at::IntArrayRef({kv_heads, n}));
    const double error = relative_error(got, reference::capkv_scores(keys, values, anchor, tau));
    std::printf("[capkv] tau %g: float32 scores against float64's: %.3g of the largest\n", tau, error);
    EXPECT_LT(error, 1e-5) << "tau " << tau;
  }
  // The query heads of a KV head are averaged, not summed: one head repeated gives its score.
  const at::Tensor one = anchor.narrow(0, 0, 1);
  const at::Tensor alone = capkv_scores(keys.narrow(0, 0, 1), values.narrow(0, 0, 1), one, 5);
  const at::Tensor thrice = capkv_scores(keys.narrow(0, 0, 1), values.narrow(0, 0, 1), one.repeat({3, 1}), 5);
  EXPECT_LT(relative_error(thrice, alone), 1e-6);
}

// R_avg applied as one rotation by averaged tables, against the averaged matrices.
TEST(CapKvScores, AnchorIsTheQueryRotatedByTheAveragedRope) {
  at::manual_seed(8);
  const auto tiny = lorakv::testing::make_tiny_engine_model();
  const auto [cos, sin] = tiny.model->rope_half_tables(1024);  // float32 [1024, 16]
  const at::Tensor mean = at::randn({4, 32}, at::kFloat);
  for (const auto& [q_len, future] : std::vector<std::pair<int64_t, int64_t>>{{40, 512}, {300, 7}, {0, 1}}) {
    const at::Tensor got = capkv_anchor(mean, q_len, future, cos, sin);  // float32 [4, 32]
    // Means of up to 512 float32 cosines: a few 1e-7 of O(1) values.
    EXPECT_LT(relative_error(got, reference::capkv_anchor(mean, q_len, future, cos, sin)), 1e-5)
        << "q_len " << q_len << ", future " << future;
  }
  EXPECT_LT(relative_error(capkv_anchor(mean, 5, 1, cos, sin),
                           unrotated(mean.unsqueeze(0), at::tensor(std::vector<int64_t>{5}, at::kLong), cos, -sin).squeeze(0)),
            1e-6)
      << "one future position: the rotation to that position";
}

// Records each layer's queries while computing the attention itself (the plain reference),
// so one forward gives the model's queries without the engine.
class RecordingAttention final : public AttentionBackend {
 public:
  explicit RecordingAttention(double scale) : scale_(scale) {}
  void attend(const LayerAttentionInput& in, const StepPlan& plan) override {
    queries.push_back(in.q.to(at::kFloat).clone());  // [T, heads, D], RoPE applied
    const at::Tensor k = in.k.transpose(0, 1).contiguous(), v = in.v.transpose(0, 1).contiguous();  // [kv, T, D]
    in.out.copy_(reference::naive_causal_attention(in.q, k, v, plan.positions, plan.positions, scale_));
  }
  std::vector<at::Tensor> queries;  // per layer

 private:
  double scale_;
};

// The queries of `tokens` before RoPE, summed over positions >= kSinks: float64 [layers, heads,
// D]. RoPE is undone pair by pair with angles p * theta^(-2i/D) computed here in double.
at::Tensor direct_query_sum(const LlamaModel& model, const std::vector<int32_t>& tokens) {
  RecordingAttention rec(model.attention_scale());
  SequenceInput in;
  in.seq = SeqId(0);
  in.tokens = tokens;
  (void)model.forward({in}, rec);
  const ModelConfig& c = model.config();
  const int64_t half = c.head_dim / 2;
  at::Tensor sum = at::zeros({c.num_layers, c.num_heads, c.head_dim}, at::kDouble);
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    const at::Tensor q = rec.queries[static_cast<size_t>(layer)].to(at::kDouble);
    for (int64_t p = kSinks; p < static_cast<int64_t>(tokens.size()); ++p) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(p) * std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
        const at::Tensor x = q[p].select(1, i), y = q[p].select(1, i + half);  // [heads]
        sum[layer].select(1, i).add_(x * std::cos(angle) + y * std::sin(angle));
        sum[layer].select(1, i + half).add_(y * std::cos(angle) - x * std::sin(angle));
      }
    }
  }
  return sum;
}

class EngineCapKv : public ::testing::Test {
 protected:
  void SetUp() override { tiny_ = lorakv::testing::make_tiny_engine_model(); }
  const LlamaModel& model() const { return *tiny_.model; }
  lorakv::testing::TinyEngineModel tiny_;
};

// 40 tokens in chunks of 16 (the first chunk straddles the sinks), nothing evicted: the
// engine's anchor is the sum of the direct queries at positions 2..39. The two differ by
// float32 rounding (chunked paged attention against one double forward): measured 1.4e-7 of
// the sum's largest entry. 1e-5 leaves room and is far below what one missed or extra query
// moves (about 1/38 of the sum).
TEST_F(EngineCapKv, AnchorIsTheMeanQueryBeforeRopeOverAChunkedPrefill) {
  const std::vector<int32_t> tokens = random_tokens(40, 70);
  Engine engine(model(), pools(16));
  const ContextId ctx = engine.create_context({SharingMode::kFull, SharedWriter::kFirst, capkv(1000)}, {nullptr});
  engine.append(ctx, tokens);
  prefill(engine, {ctx, 0});
  const ContextRows rows = engine.export_context(ctx, {0});
  ASSERT_TRUE(rows.own.at(0).has_value());
  const SequenceRows& own = *rows.own[0];
  EXPECT_EQ(own.query_count, 40 - kSinks);
  ASSERT_TRUE(own.query_sum.defined());
  EXPECT_EQ(own.query_sum.scalar_type(), at::kFloat);
  const at::Tensor want = direct_query_sum(model(), tokens);
  ASSERT_EQ(own.query_sum.sizes(), want.sizes());
  const double error = relative_error(own.query_sum, want);
  std::printf("[capkv] engine's anchor against the direct queries: %.3g of the largest\n", error);
  EXPECT_LT(error, 1e-5);

  // Forks start from the same anchor and then go their own way; import restores it.
  const ContextId fork = engine.fork_context(ctx);
  engine.append(fork, random_tokens(8, 71));
  prefill(engine, {fork, 0});
  EXPECT_EQ(engine.export_context(fork, {0}).own.at(0)->query_count, 48 - kSinks);
  const SequenceRows again = *engine.export_context(ctx, {0}).own.at(0);
  EXPECT_EQ(again.query_count, 40 - kSinks) << "the fork's queries stay in the fork";
  EXPECT_TRUE(at::equal(again.query_sum, own.query_sum));
  const ContextId restored = engine.import_context(rows, {nullptr});
  const SequenceRows back = *engine.export_context(restored, {0}).own.at(0);
  EXPECT_EQ(back.query_count, own.query_count);
  EXPECT_TRUE(at::equal(back.query_sum, own.query_sum));
  ContextRows bad = rows;
  bad.own[0]->query_sum = at::zeros({3, 2, 32}, at::kFloat);
  EXPECT_THROW(engine.import_context(bad, {nullptr}), ConfigError) << "an anchor for three layers";
}

// In base_shared the second reader fills its own residual rows over the shared rows the first
// wrote: it runs queries over every token, but they are not the writer's and do not enter
// the anchor.
TEST_F(EngineCapKv, OnlyTheWritersQueriesEnterTheAnchor) {
  const std::vector<std::shared_ptr<const adapters::Adapter>> readers = {
      lorakv::testing::make_tiny_adapter(model(), "planner", 1, 11), lorakv::testing::make_tiny_adapter(model(), "critic", 2, 33)};
  Engine engine(model(), pools(16));
  const ContextId ctx = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst, capkv(1000)}, readers);
  engine.append(ctx, random_tokens(30, 72));
  prefill(engine, {ctx, 0});
  const SequenceRows first = *engine.export_context(ctx, {}).shared;
  EXPECT_EQ(first.query_count, 30 - kSinks);
  ASSERT_EQ(engine.pending_tokens({ctx, 1}), 30) << "the second reader runs every token";
  prefill(engine, {ctx, 1});
  EXPECT_EQ(engine.pending_tokens({ctx, 1}), 0);
  const SequenceRows second = *engine.export_context(ctx, {}).shared;
  EXPECT_EQ(second.query_count, 30 - kSinks);
  EXPECT_TRUE(at::equal(second.query_sum, first.query_sum));
}

// 28 rows, then 8 more take the lane to 36 of a budget of 30: the engine keeps the sinks 0, 1,
// the window 32..35 and the 24 best of positions 2..31 by the reference score over the rows
// after the sinks, with the anchor rotated to q_len 36.
TEST_F(EngineCapKv, EvictionKeepsTheRowsTheReferenceScoresHighest) {
  const std::vector<int32_t> first = random_tokens(28, 73), second = random_tokens(8, 74);
  Engine full(model(), pools(512));  // the same chunks, never evicted: the reference's rows
  const ContextId all = full.create_context({SharingMode::kFull, SharedWriter::kFirst, {}}, {nullptr});
  Engine engine(model(), pools(512));
  const ContextId ctx = engine.create_context({SharingMode::kFull, SharedWriter::kFirst, capkv(30)}, {nullptr});
  for (const std::vector<int32_t>* part : {&first, &second}) {
    full.append(all, *part);
    prefill(full, {all, 0});
    engine.append(ctx, *part);
    prefill(engine, {ctx, 0});
  }
  const SequenceRows own = *engine.export_context(ctx, {0}).own.at(0);
  ASSERT_EQ(own.query_count, 36 - kSinks);
  const auto [cos, sin] = model().rope_half_tables(1024);
  const at::Tensor anchor = reference::capkv_anchor(
      (own.query_sum / static_cast<double>(own.query_count)).view({-1, 32}), 36, 512, cos, sin);  // double [layers * heads, D]
  const std::vector<std::vector<int32_t>> kept = engine.kept_positions(ctx);
  const ContextRows full_rows = full.export_context(all, {0});
  for (int64_t layer = 0; layer < 2; ++layer) {
    const at::Tensor k = full_rows.own[0]->k[static_cast<size_t>(layer)].transpose(0, 1);  // [kv, 36, D]
    const at::Tensor v = full_rows.own[0]->v[static_cast<size_t>(layer)].transpose(0, 1);
    const at::Tensor score = reference::capkv_scores(k.narrow(1, kSinks, 36 - kSinks), v.narrow(1, kSinks, 36 - kSinks),
                                                     anchor.narrow(0, layer * 2, 2), 5)[0];  // [34]: positions 2..35
    std::vector<int32_t> candidates;
    for (int32_t p = kSinks; p < 32; ++p) candidates.push_back(p);
    std::sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
      return score[a - kSinks].item<double>() > score[b - kSinks].item<double>();
    });
    std::vector<int32_t> expected = {0, 1, 32, 33, 34, 35};
    expected.insert(expected.end(), candidates.begin(), candidates.begin() + 24);
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(kept[static_cast<size_t>(layer)], expected) << "layer " << layer;
  }
}

}  // namespace
}  // namespace lorakv::runtime
