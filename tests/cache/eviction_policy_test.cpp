// tests/cache/eviction_policy_test.cpp: the policies as pure functions (expected sets worked
// out by hand from each policy's definition), the protected rows, the budget, and the keys'
// checks naming the key.
#include "lorakv/cache/eviction/eviction_policy.h"
#include "lorakv/cache/eviction/policies.h"

#include <gtest/gtest.h>

#include <limits>

#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {
namespace {

EvictionConfig config(const std::string& policy, int64_t sinks, int64_t window) {
  EvictionConfig c;
  c.policy = policy;
  c.budget_tokens = 6;
  c.sinks = sinks;
  c.window = window;
  return c;
}

// Positions 0..n-1 with a gap (rows evicted earlier), scores as given.
LaneCandidates lane(std::vector<int32_t> positions, std::vector<float> scores = {}) {
  LaneCandidates l;
  l.positions = std::move(positions);
  l.scores = std::move(scores);
  return l;
}

using Rows = std::vector<int64_t>;

TEST(EvictionPolicy, StreamingLlmKeepsSinksAndTheNewestRows) {
  const auto p = make_policy(config("streaming_llm", 2, 1));
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->needs_scores());
  const LaneCandidates l = lane({0, 1, 2, 3, 7, 8, 9, 10, 11, 12});
  // Sinks 0, 1 (rows 0, 1); then the newest 4 rows: 9..12 (rows 6..9).
  EXPECT_EQ(p->keep(l, 6), (Rows{0, 1, 6, 7, 8, 9}));
  // A budget below the protected rows keeps them all and nothing else.
  EXPECT_EQ(p->keep(l, 1), (Rows{0, 1, 9}));
  // A budget above the rows keeps every row.
  EXPECT_EQ(p->keep(l, 50).size(), 10u);
}

TEST(EvictionPolicy, H2oKeepsHeavyHittersAndTheWindow) {
  const auto p = make_policy(config("h2o", 1, 2));
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->needs_scores());
  const LaneCandidates l = lane({0, 1, 2, 3, 4, 5, 6, 7}, {9, 0.5f, 3, 0.1f, 2, 2, 0, 0});
  // Protected: sink row 0, window rows 6, 7. Room 3 among rows 1..5: scores 0.5, 3, 0.1, 2, 2
  // -> rows 2, 4, 5 (the two 2s both fit).
  EXPECT_EQ(p->keep(l, 6), (Rows{0, 2, 4, 5, 6, 7}));
  // Room 2: row 2, then the tie between rows 4 and 5 goes to the newer row 5.
  EXPECT_EQ(p->keep(l, 5), (Rows{0, 2, 5, 6, 7}));
}

TEST(EvictionPolicy, SnapKvPoolsScoresOverNeighbouringRows) {
  const auto p = make_policy(config("snapkv", 0, 1));
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->needs_scores());
  EXPECT_EQ(p->score_source(), ScoreSource::kObservationMass);
  const LaneCandidates l = lane({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 0, 0, 10, 0, 0, 0, 0, 0, 0});
  // Pooled over rows i-2..i+2 (/5): rows 1..5 score 2, the rest 0. Row 9 is the window;
  // room 2 among the ties goes to the newest, 5 and 4 (H2O would keep row 3 itself).
  EXPECT_EQ(p->keep(l, 3), (Rows{4, 5, 9}));
  const LaneCandidates edge = lane({0, 1, 2, 3, 4, 5}, {8, 0, 0, 0, 0, 3});
  // Row 0: (8 + 0 + 0) / 5 = 1.6; row 2: 8/5 = 1.6 too (rows 0..4); row 3: 0, as the window
  // row 5 is cut off before pooling.
  EXPECT_EQ(p->keep(edge, 3), (Rows{1, 2, 5})) << "pooled 1.6 for rows 0..2, the newest two";
  // The window's own mass lifts no row before it (kvpress pools the rows before the window
  // only): rows 0..2 pool to 0.2, rows 3..5 to 0, so row 2 stays, not row 5 beside the window.
  EXPECT_EQ(p->keep(lane({0, 1, 2, 3, 4, 5, 6}, {1, 0, 0, 0, 0, 0, 50}), 2), (Rows{2, 6}));
  EvictionConfig no_window = config("snapkv", 0, 0);
  EXPECT_THROW(no_window.check(), ConfigError) << "snapkv needs an observation window";
}

TEST(EvictionPolicy, ProtectedSpansAreNeverEvicted) {
  EvictionConfig c = config("h2o", 0, 0);
  c.protected_spans = {{3, 5}};
  const auto p = make_policy(c);
  const LaneCandidates l = lane({0, 1, 2, 3, 4, 5}, {5, 4, 3, 0, 0, 1});
  EXPECT_EQ(p->keep(l, 3), (Rows{0, 3, 4})) << "the span takes two of the three rows";
}

TEST(EvictionPolicy, BudgetInTokensOrAsAFraction) {
  EvictionConfig c = config("streaming_llm", 4, 16);
  EXPECT_EQ(c.budget_rows(1000), 6);
  c.budget_tokens = 0;
  c.budget_fraction = 0.25;
  EXPECT_EQ(c.budget_rows(1000), 250);
  EXPECT_EQ(c.budget_rows(3), 1) << "rounds up";
  EXPECT_EQ(EvictionConfig{}.budget_rows(1000), -1) << "none: no budget";
  EXPECT_EQ(make_policy(EvictionConfig{}), nullptr);
}

// The ConfigError's key for a config that check() refuses.
std::string refused_key(const EvictionConfig& c) {
  try {
    c.check("cache.eviction");
  } catch (const ConfigError& e) {
    return e.context().key;
  }
  return "(accepted)";
}

TEST(EvictionPolicy, BadKeysAreRefusedByName) {
  EvictionConfig c = config("streaming_llm", 4, 16);
  EXPECT_EQ(refused_key(c), "(accepted)");
  c.policy = "h20";
  EXPECT_EQ(refused_key(c), "cache.eviction.policy");
  c = config("h2o", 4, 16);
  c.budget_tokens = 0;
  EXPECT_EQ(refused_key(c), "cache.eviction.budget") << "a policy needs a budget";
  c.budget_fraction = 1.5;
  EXPECT_EQ(refused_key(c), "cache.eviction.budget");
  c = config("h2o", 4, 16);
  c.budget_fraction = 0.5;
  EXPECT_EQ(refused_key(c), "cache.eviction.budget") << "tokens and fraction both";
  c = config("h2o", -1, 16);
  EXPECT_EQ(refused_key(c), "cache.eviction.sinks");
  c = config("h2o", 4, -2);
  EXPECT_EQ(refused_key(c), "cache.eviction.window");
  c = config("h2o", 4, 16);
  c.protected_spans = {{5, 2}};
  EXPECT_EQ(refused_key(c), "cache.eviction.protected");
  EXPECT_THROW(make_policy(config("snap", 4, 4)), ConfigError);
}

TEST(EvictionPolicy, BadKeysOfTheScoringAndLayerPoliciesAreRefusedByName) {
  EvictionConfig c = config("h2o", 4, 16);
  c.scoring = "mean";
  EXPECT_EQ(refused_key(c), "cache.eviction.scoring");
  c = config("streaming_llm", 4, 16);
  c.scoring = "max";
  EXPECT_EQ(refused_key(c), "cache.eviction.scoring") << "streaming_llm has no scores to combine";
  c = config("leverage", 4, 16);
  c.scoring = "sum";
  EXPECT_EQ(refused_key(c), "cache.eviction.scoring") << "leverage scores keys, not attention";
  c = config("pyramidkv", 4, 16);
  c.layer_budgets = "cone";
  EXPECT_EQ(refused_key(c), "cache.eviction.layer_budgets");
  c.layer_budgets = "list";
  EXPECT_EQ(refused_key(c), "cache.eviction.layer_weights") << "a list needs its weights";
  c.layer_weights = {1, 0};
  EXPECT_EQ(refused_key(c), "cache.eviction.layer_weights") << "weights are positive";
  c.layer_budgets = "flat";
  c.layer_weights = {1, 2};
  EXPECT_EQ(refused_key(c), "cache.eviction.layer_budgets") << "weights without a list";
  c = config("pyramidkv", 4, 16);
  c.pyramid_beta = 0.5;
  EXPECT_EQ(refused_key(c), "cache.eviction.pyramid_beta");
  c = config("adakv", 4, 16);
  c.head_floor = 1.5;
  EXPECT_EQ(refused_key(c), "cache.eviction.head_floor");
  c = config("leverage", 4, 16);
  c.leverage_rank = 0;
  EXPECT_EQ(refused_key(c), "cache.eviction.leverage_rank");
  for (const char* windowed : {"pyramidkv", "adakv"}) {
    EXPECT_EQ(refused_key(config(windowed, 4, 0)), "cache.eviction.window") << windowed << " observes a window";
  }
  c = config("h2o", 4, 16);
  EXPECT_EQ(c.resolved_scoring(), "sum");
  c.policy = "snapkv";
  EXPECT_EQ(c.resolved_scoring(), "writer") << "SnapKV observes the prompt's own queries";
  c.scoring = "max";
  EXPECT_EQ(c.resolved_scoring(), "max");
}

// kvpress's PyramidKVPress.get_layer_budget, worked by hand for each case.
TEST(EvictionPolicy, PyramidKvBudgetsDeclineLinearlyOverLayersWithTheBudgetAsTheirMean) {
  // b = 100 of 1000 tokens, window 4, beta 20: min 100/20 = 5, max 200 - 5 = 195; steps of
  // 190/4 = 47.5 over 5 layers: 195, 147.5, 100, 52.5, 5, rounded halves to even.
  std::vector<int64_t> got;
  for (int64_t layer = 0; layer < 5; ++layer) got.push_back(PyramidKvPolicy::pyramid_budget(layer, 5, 100, 1000, 4, 20));
  EXPECT_EQ(got, (std::vector<int64_t>{195, 148, 100, 52, 5}));
  // b = 400 of 600, window 4: max 800 - 20 = 780 would pass 600 - 4, so max = 596 and
  // min = 800 - 596 = 204; over 3 layers: 596, 400, 204.
  got.clear();
  for (int64_t layer = 0; layer < 3; ++layer) got.push_back(PyramidKvPolicy::pyramid_budget(layer, 3, 400, 600, 4, 20));
  EXPECT_EQ(got, (std::vector<int64_t>{596, 400, 204}));
  // b / beta = 5 below the window 16: no pyramid fits, every layer keeps b (kvpress's rule).
  EXPECT_EQ(PyramidKvPolicy::pyramid_budget(0, 5, 100, 1000, 16, 20), 100);
  EXPECT_EQ(PyramidKvPolicy::pyramid_budget(4, 5, 100, 1000, 16, 20), 100);

  EvictionConfig c = config("pyramidkv", 0, 4);
  EXPECT_EQ(make_policy(c)->layer_budget(1, 5, 100, 1000), 148) << "pyramid is the default curve";
  c.layer_budgets = "flat";
  EXPECT_EQ(make_policy(c)->layer_budget(1, 5, 100, 1000), 100);
  c.layer_budgets = "list";
  c.layer_weights = {1, 3};
  const auto listed = make_policy(c);
  EXPECT_EQ(listed->layer_budget(0, 2, 10, 1000), 5) << "weight 1 of mean 2";
  EXPECT_EQ(listed->layer_budget(1, 2, 10, 1000), 15);
  EXPECT_EQ(make_policy(config("snapkv", 0, 4))->layer_budget(1, 5, 100, 1000), 100) << "other policies are flat";
}

// Two KV heads of one layer, no sinks, a window of one row (row 5 of each head). Head A's
// scores are spread: rows 0..4 pool to 6, 8, 10, 8, 6. Head B's mass is all in its window
// row, which SnapKV cuts off before pooling: rows 0..4 pool to 0.
TEST(EvictionPolicy, AdaKvSpreadsALayersBudgetOverItsHeadsAboveAFloor) {
  const std::vector<LaneCandidates> heads = {lane({0, 1, 2, 3, 4, 5}, {10, 10, 10, 10, 10, 10}),
                                             lane({0, 1, 2, 3, 4, 5}, {0, 0, 0, 0, 0, 5})};
  EvictionConfig c = config("adakv", 0, 1);
  c.head_floor = 0;
  const auto p = make_policy(c);
  ASSERT_TRUE(p->budget_shared_by_layer_lanes());
  // 3 rows per head, 6 for the layer: the windows, then A's 10 (row 2), 8s (3, 1), and the
  // newer 6 (row 4).
  EXPECT_EQ(p->keep_layer(heads, 3), (std::vector<Rows>{{1, 2, 3, 4, 5}, {5}}));
  // SnapKV keeps 3 per head: the window and the best two (ties go to the newer rows).
  EXPECT_EQ(make_policy(config("snapkv", 0, 1))->keep_layer(heads, 3), (std::vector<Rows>{{2, 3, 5}, {3, 4, 5}}));
  // A floor of the whole share: every head keeps its 3 first, nothing is left to spread.
  c.head_floor = 1;
  EXPECT_EQ(make_policy(c)->keep_layer(heads, 3), (std::vector<Rows>{{2, 3, 5}, {3, 4, 5}}));
  // Floor int(3 * 0.5) = 1 row, which each head's window already fills: as without floor.
  c.head_floor = 0.5;
  EXPECT_EQ(make_policy(c)->keep_layer(heads, 3), (std::vector<Rows>{{1, 2, 3, 4, 5}, {5}}));
  // Budget 2: the windows, then A's 10 and its newer 8.
  EXPECT_EQ(make_policy(c)->keep_layer(heads, 2), (std::vector<Rows>{{2, 3, 5}, {5}}));
}

TEST(EvictionPolicy, LeverageKeepsTheHighestKeyScores) {
  const auto p = make_policy(config("leverage", 1, 1));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->score_source(), ScoreSource::kKeys);
  const LaneCandidates l = lane({0, 1, 2, 3, 4, 5}, {0, 0.9f, 0.1f, 0.8f, 0.2f, 0});
  EXPECT_EQ(p->keep(l, 4), (Rows{0, 1, 3, 5})) << "sink 0, window 5, then rows 1 and 3";
}

// capkv's scores come from the engine (runtime/eviction_scores.h); the policy keeps the
// protected rows (sinks, window, spans) and then the highest scores, ties to the newer row.
TEST(EvictionPolicy, CapKvKeepsTheHighestCapacityScoresBeyondProtectedRows) {
  EvictionConfig c = config("capkv", 2, 1);
  c.protected_spans = {{4, 5}};
  const auto p = make_policy(c);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->score_source(), ScoreSource::kKeysValuesQueries);
  EXPECT_TRUE(p->needs_scores());
  // Sinks 0, 1 score highest (as the engine pads them) but are protected anyway; the window
  // row 7 and the span's row 4 score 0 and stay.
  const LaneCandidates l = lane({0, 1, 2, 3, 4, 5, 6, 7}, {9, 9, 0.3f, 0.7f, 0, 0.5f, 0.5f, 0});
  // Protected: 0, 1, 4, 7. Room 2 among rows 2, 3, 5, 6: row 3 (0.7), then the tie 0.5
  // between 5 and 6 goes to the newer row 6.
  EXPECT_EQ(p->keep(l, 6), (Rows{0, 1, 3, 4, 6, 7}));
  EXPECT_EQ(p->keep(l, 3), (Rows{0, 1, 4, 7})) << "protected rows alone exceed the budget";
  EXPECT_EQ(p->keep(l, 8).size(), 8u);
}

TEST(EvictionPolicy, BadCapKvKeysAreRefusedByName) {
  EvictionConfig c = config("capkv", 4, 0);
  EXPECT_EQ(refused_key(c), "(accepted)") << "capkv needs no window";
  EXPECT_EQ(c.resolved_scoring(), "writer") << "its anchor is the writer's mean query";
  c.scoring = "writer";
  EXPECT_EQ(refused_key(c), "(accepted)");
  for (const char* scoring : {"sum", "max"}) {
    c.scoring = scoring;
    EXPECT_EQ(refused_key(c), "cache.eviction.scoring") << scoring << ": one anchor, the writer's";
  }
  c = config("capkv", 4, 0);
  c.capkv_tau = -1;
  EXPECT_EQ(refused_key(c), "cache.eviction.capkv_tau");
  c.capkv_tau = std::numeric_limits<double>::infinity();
  EXPECT_EQ(refused_key(c), "cache.eviction.capkv_tau");
  c.capkv_tau = 0;
  EXPECT_EQ(refused_key(c), "(accepted)") << "tau 0: every row weighted alike";
  c.capkv_future_positions = 0;
  EXPECT_EQ(refused_key(c), "cache.eviction.capkv_future_positions");
  c.capkv_future_positions = (int64_t{1} << 20) + 1;
  EXPECT_EQ(refused_key(c), "cache.eviction.capkv_future_positions");
  EXPECT_EQ(EvictionConfig{}.capkv_tau, 5);
  EXPECT_EQ(EvictionConfig{}.capkv_future_positions, 512);
  c = config("h2o", 4, 0);
  c.window_growth = -0.5;
  EXPECT_EQ(refused_key(c), "cache.eviction.window_growth");
  c.window_growth = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(refused_key(c), "cache.eviction.window_growth");
  c.window_growth = 2;
  EXPECT_EQ(refused_key(c), "(accepted)");
  EXPECT_EQ(EvictionConfig{}.window_growth, 0);
  EXPECT_FALSE(EvictionConfig{}.loss_bound);
}

}  // namespace
}  // namespace lorakv::cache::eviction
