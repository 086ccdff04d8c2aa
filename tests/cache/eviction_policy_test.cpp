// tests/cache/eviction_policy_test.cpp: the policies as pure functions (expected sets worked
// out by hand from each policy's definition), the protected rows, the budget, and the keys'
// checks naming the key.
#include "lorakv/cache/eviction/eviction_policy.h"

#include <gtest/gtest.h>

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
  EXPECT_TRUE(p->scores_from_observation_window());
  const LaneCandidates l = lane({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 0, 0, 10, 0, 0, 0, 0, 0, 0});
  // Pooled over rows i-2..i+2 (/5): rows 1..5 score 2, the rest 0. Row 9 is the window;
  // room 2 among the ties goes to the newest, 5 and 4 (H2O would keep row 3 itself).
  EXPECT_EQ(p->keep(l, 3), (Rows{4, 5, 9}));
  const LaneCandidates edge = lane({0, 1, 2, 3, 4, 5}, {8, 0, 0, 0, 0, 3});
  // Row 0: (8 + 0 + 0) / 5 = 1.6; row 2: 8/5 = 1.6 too (rows 0..4); row 3: 3/5; window row 5.
  EXPECT_EQ(p->keep(edge, 3), (Rows{1, 2, 5})) << "pooled 1.6 for rows 0..2, the newest two";
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

}  // namespace
}  // namespace lorakv::cache::eviction
