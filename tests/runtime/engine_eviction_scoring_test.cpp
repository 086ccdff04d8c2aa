// tests/runtime/engine_eviction_scoring_test.cpp: where the engine's row scores come from
// and how the layer-aware policies spend the budget, on the tiny model
// (tests/runtime/tiny_engine_model.h: 2 layers, 1 KV head of 32).
//   - scoring across readers: with two readers reading one shared context in one step, a
//     row's added score is the sum (`sum`) or the max (`max`) of what each reader alone
//     adds, and nothing from a reader that does not write the rows (`writer`);
//   - pyramidkv with a weight list keeps each layer's own budget;
//   - leverage keeps the rows whose keys (un-rotated from the cache) score highest under an
//     independent computation of the score (an SVD instead of an eigendecomposition);
//   - unrotated_keys undoes kernels::apply_rope, and key_leverage matches a hand case;
//   - keys the engine cannot serve are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "lorakv/kernels/rope.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/eviction_scores.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/runtime/step_then_evict.h"

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 48);
  return t;
}

cache::eviction::EvictionConfig policy(const std::string& name, int64_t budget) {
  cache::eviction::EvictionConfig c;
  c.policy = name;
  c.budget_tokens = budget;
  c.sinks = 2;
  c.window = 4;
  return c;
}

EngineOptions pools() {
  EngineOptions eo;
  eo.base_rows = 1024;
  eo.residual_rows = 1024;
  eo.block_size = 16;
  return eo;
}

// The context's shared rows: the one sequence that is not a reader's private suffix.
SeqId shared_sequence(const Engine& e) {
  for (SeqId seq : e.cache().manager().sequences()) {
    if (e.cache().manager().sequence(seq).first_position == 0) return seq;
  }
  return SeqId();
}

std::vector<std::vector<float>> lane_scores(const Engine& e) {
  std::vector<std::vector<float>> out;
  for (const cache::BaseLane& l : e.cache().manager().sequence(shared_sequence(e)).lanes) out.push_back(l.scores);
  return out;
}

class EngineEvictionScoring : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = lorakv::testing::make_tiny_engine_model();
    readers_ = {lorakv::testing::make_tiny_adapter(model(), "planner", 1, 11),
                lorakv::testing::make_tiny_adapter(model(), "critic", 1, 33)};
  }
  const LlamaModel& model() const { return *tiny_.model; }

  // An h2o context of two readers on 40 shared tokens (budget far above: nothing is
  // evicted), written by reader 0; then the readers in `stepping` each decode one private
  // token in one step. Returns each lane's score added by that step.
  std::vector<std::vector<float>> added_by_private_step(const std::string& scoring, const std::vector<int32_t>& stepping) {
    Engine engine(model(), pools());
    cache::eviction::EvictionConfig h2o = policy("h2o", 1000);
    h2o.scoring = scoring;
    const ContextId ctx = engine.create_context({SharingMode::kBaseLrShared, SharedWriter::kFirst, h2o}, readers_);
    engine.append(ctx, random_tokens(40, 5));
    prefill(engine, {ctx, 0});
    prefill(engine, {ctx, 1});
    const std::vector<std::vector<float>> before = lane_scores(engine);
    std::vector<StepWork> work;
    for (int32_t i : stepping) {
      work.push_back(StepWork::private_tokens({ctx, i}, {static_cast<int32_t>(7 + i)}));
    }
    EXPECT_TRUE(lorakv::testing::step_then_evict(engine, work).ok);
    std::vector<std::vector<float>> added = lane_scores(engine);
    for (size_t lane = 0; lane < added.size(); ++lane) {
      for (size_t r = 0; r < added[lane].size(); ++r) added[lane][r] -= before[lane][r];
    }
    return added;
  }

  lorakv::testing::TinyEngineModel tiny_;
  std::vector<AdapterPtr> readers_;
};

// float32 sums of up to two readers' masses (each <= 2 units per row): a few ulps.
constexpr float kMassTolerance = 1e-5f;

TEST_F(EngineEvictionScoring, ReadersMassIsSummedOrMaxedAndTheWriterAloneIgnoresReaders) {
  const auto alone0 = added_by_private_step("sum", {0});
  const auto alone1 = added_by_private_step("sum", {1});
  const auto sum = added_by_private_step("sum", {0, 1});
  const auto max = added_by_private_step("max", {0, 1});
  const auto writer = added_by_private_step("writer", {0, 1});
  ASSERT_EQ(alone0.size(), sum.size());
  int64_t rows_where_readers_differ = 0;
  for (size_t lane = 0; lane < sum.size(); ++lane) {
    ASSERT_EQ(sum[lane].size(), 40u);
    for (size_t r = 0; r < sum[lane].size(); ++r) {
      EXPECT_NEAR(sum[lane][r], alone0[lane][r] + alone1[lane][r], kMassTolerance) << "lane " << lane << " row " << r;
      EXPECT_NEAR(max[lane][r], std::max(alone0[lane][r], alone1[lane][r]), kMassTolerance) << "lane " << lane << " row " << r;
      EXPECT_EQ(writer[lane][r], 0.f) << "private tokens write no shared rows";
      rows_where_readers_differ += std::abs(alone0[lane][r] - alone1[lane][r]) > 1e-3f;
    }
  }
  EXPECT_GT(rows_where_readers_differ, 10) << "the readers' adapters attend differently: max and sum tell apart";
}

TEST_F(EngineEvictionScoring, PyramidKvKeepsEachLayersOwnBudget) {
  Engine engine(model(), pools());
  cache::eviction::EvictionConfig pyramid = policy("pyramidkv", 30);
  pyramid.layer_budgets = "list";
  pyramid.layer_weights = {1, 3};  // budgets 15 and 45: the mean stays 30
  const ContextId ctx = engine.create_context({SharingMode::kFull, SharedWriter::kFirst, pyramid}, {nullptr});
  for (uint32_t chunk = 0; chunk < 6; ++chunk) {
    engine.append(ctx, random_tokens(20, 40 + chunk));
    prefill(engine, {ctx, 0});
  }
  const std::vector<std::vector<int32_t>> kept = engine.kept_positions(ctx);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].size(), 15u);
  EXPECT_EQ(kept[1].size(), 45u);
  for (const auto& lane : kept) {
    EXPECT_EQ(lane.front(), 0) << "sink";
    EXPECT_EQ(lane.back(), 119) << "window";
  }
  // The layers now hold different rows: the kernel plans once per shape, twice in a step.
  engine.append(ctx, random_tokens(1, 50));
  StepWork next;
  next.reader = {ctx, 0};
  const StepResult step = engine.step({next});
  ASSERT_TRUE(step.ok);
  EXPECT_EQ(step.stats.kernel_plans, 2);
  pyramid.layer_weights = {1, 2, 3};
  EXPECT_THROW(engine.create_context({SharingMode::kFull, SharedWriter::kFirst, pyramid}, {nullptr}), ConfigError)
      << "three weights for two layers";
}

// The leverage score by another route: the right singular vectors of K span the same top
// directions as the eigenvectors of K^T K. keys: float32 [heads, N, D]. Returns [N].
std::vector<double> leverage_by_svd(const at::Tensor& keys, int64_t rank) {
  const at::Tensor k = keys.to(at::kDouble);
  std::vector<double> score(static_cast<size_t>(k.size(1)), 0.0);
  for (int64_t h = 0; h < k.size(0); ++h) {
    const at::Tensor vh = std::get<2>(at::linalg_svd(k[h], /*full_matrices=*/false));  // [D, D], descending
    const at::Tensor proj = at::matmul(k[h], vh.narrow(0, 0, rank).t()).pow(2).sum(1) / k[h].pow(2).sum(1);
    for (int64_t i = 0; i < k.size(1); ++i) score[static_cast<size_t>(i)] += proj[i].item<double>();
  }
  return score;
}

TEST_F(EngineEvictionScoring, LeverageKeepsTheKeysAnIndependentScoreRanksHighest) {
  const std::vector<int32_t> first = random_tokens(28, 60), second = random_tokens(8, 61);
  // The reference: the same 36 rows, never evicted, scored by the SVD route.
  Engine full(model(), pools());
  const ContextId all = full.create_context({SharingMode::kFull, SharedWriter::kFirst, {}}, {nullptr});
  full.append(all, first);
  prefill(full, {all, 0});  // the same chunks as below, so the same float32 keys
  full.append(all, second);
  prefill(full, {all, 0});
  const auto [cos, sin] = model().rope_half_tables(1024);
  // Under test: 28 rows, then 8 more take the lane to 36 of a budget of 30.
  Engine engine(model(), pools());
  cache::eviction::EvictionConfig lev = policy("leverage", 30);
  lev.leverage_rank = 3;
  const ContextId ctx = engine.create_context({SharingMode::kFull, SharedWriter::kFirst, lev}, {nullptr});
  engine.append(ctx, first);
  prefill(engine, {ctx, 0});
  engine.append(ctx, second);
  prefill(engine, {ctx, 0});
  const std::vector<std::vector<int32_t>> kept = engine.kept_positions(ctx);
  for (int64_t layer = 0; layer < 2; ++layer) {
    const cache::GatheredRows rows = full.cache().gather_lane(shared_sequence(full), layer, 0);
    const std::vector<double> score = leverage_by_svd(unrotated_keys(rows.k, rows.positions, cos, sin), 3);
    // Sinks 0, 1 and the window 32..35 stay; of positions 2..31 the 24 best by the reference.
    std::vector<int32_t> candidates;
    for (int32_t p = 2; p < 32; ++p) candidates.push_back(p);
    std::sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) { return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]; });
    std::vector<int32_t> expected = {0, 1, 32, 33, 34, 35};
    expected.insert(expected.end(), candidates.begin(), candidates.begin() + 24);
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(kept[static_cast<size_t>(layer)], expected) << "layer " << layer;
  }
}

TEST(EvictionScores, UnrotatedKeysUndoRope) {
  const at::Tensor positions = at::tensor(std::vector<int64_t>{0, 3, 17, 250}, at::kLong);
  const at::Tensor inv_freq = kernels::rope_inv_freq(32, 10000.0);
  const auto [cos, sin] = kernels::rope_cos_sin(positions, inv_freq);  // [4, 32]
  const at::Tensor before = at::randn({4, 2, 32}, at::TensorOptions(at::kFloat));  // [N, heads, D]
  const at::Tensor rotated = kernels::apply_rope(before, cos, sin).transpose(0, 1);  // [heads, N, D]
  const auto [cos_all, sin_all] = kernels::rope_cos_sin(at::arange(256, at::kLong), inv_freq);
  const at::Tensor back = unrotated_keys(rotated, positions, cos_all.narrow(1, 0, 16).contiguous(), sin_all.narrow(1, 0, 16).contiguous());
  // A rotation and its inverse in float32 on O(1) values: a few ulps.
  EXPECT_LT((back - before.transpose(0, 1)).abs().max().item<float>(), 1e-5f);
  EXPECT_GT((rotated - before.transpose(0, 1)).abs().max().item<float>(), 0.1f) << "the rotation did something";
}

TEST(EvictionScores, KeyLeverageIsTheShareOfAKeyInTheTopDirections) {
  // Three large keys along e0, one small along e1, one along e1 + e2, one zero: the second
  // moment is block-diagonal (e0 | e1, e2) with e0's eigenvalue 27 on top, so at rank 1 a key
  // scores its share along e0.
  const float h = static_cast<float>(std::sqrt(0.5));
  const at::Tensor keys =
      at::tensor(std::vector<float>{3, 0, 0, -3, 0, 0, 2, 0, 0, 0, 1, 0, 0, h, h, 0, 0, 0}, at::kFloat).view({1, 6, 3});
  const at::Tensor s = key_leverage(keys, 1);
  const std::vector<float> got(s.data_ptr<float>(), s.data_ptr<float>() + 6);
  const std::vector<float> want = {1, 1, 1, 0, 0, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f) << "row " << i << " (a zero key scores 0)";
  const at::Tensor all = key_leverage(keys, 3);
  for (int64_t i = 0; i < 5; ++i) EXPECT_NEAR(all[i].item<float>(), 1.f, 1e-6f) << "every direction: a nonzero key scores 1";
  // Two heads add up.
  EXPECT_NEAR(key_leverage(at::cat({keys, keys}, 0), 1)[0].item<float>(), 2.f, 1e-6f);
}

TEST_F(EngineEvictionScoring, KeysTheEngineCannotServeAreRefusedByName) {
  Engine engine(model(), pools());
  try {
    engine.create_context({SharingMode::kFull, SharedWriter::kFirst, policy("adakv", 30)}, {nullptr});
    FAIL() << "adakv on a layer-wide lane was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.context().key, "eviction.policy");
    EXPECT_NE(std::string(e.what()).find("per_head_token_sets"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine.memory().cache.bytes_in_use, 0);
}

}  // namespace
}  // namespace lorakv::runtime
