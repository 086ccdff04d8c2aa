// tests/cache/compaction_test.cpp: plan_compaction against a direct simulation of packing.
#include "lorakv/cache/compaction.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "lorakv/common/errors.h"

namespace lorakv::cache {
namespace {

// Applies a plan to a lane whose row i holds the label i (gather all sources, then scatter)
// and returns the first num_rows_after labels.
std::vector<int64_t> simulate(int64_t num_rows, const CompactionPlan& plan) {
  std::vector<int64_t> rows(static_cast<size_t>(num_rows));
  for (int64_t i = 0; i < num_rows; ++i) rows[static_cast<size_t>(i)] = i;
  std::vector<int64_t> values;
  for (const RowMove& m : plan.moves) values.push_back(rows[static_cast<size_t>(m.src_row)]);
  for (size_t i = 0; i < plan.moves.size(); ++i) rows[static_cast<size_t>(plan.moves[i].dst_row)] = values[i];
  rows.resize(static_cast<size_t>(plan.num_rows_after));
  return rows;
}

TEST(Compaction, KeepAllMovesNothing) {
  CompactionPlan p = plan_compaction(10, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 4);
  EXPECT_TRUE(p.moves.empty());
  EXPECT_TRUE(p.rewritten_blocks.empty());
  EXPECT_EQ(p.truncated_block, -1);
  EXPECT_EQ(p.num_blocks_after, 3);
}

TEST(Compaction, DroppingTheTailOnlyTruncates) {
  CompactionPlan p = plan_compaction(8, {0, 1, 2, 3, 4}, 4);
  EXPECT_TRUE(p.moves.empty());
  EXPECT_EQ(p.num_blocks_after, 2);
  EXPECT_EQ(p.truncated_block, 1);
}

TEST(Compaction, RandomKeepSetsPackStably) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 2000; ++iter) {
    const int64_t bs = 1 + static_cast<int64_t>(rng() % 8);
    const int64_t n = static_cast<int64_t>(rng() % 60);
    std::vector<int64_t> keep;
    const unsigned pct = rng() % 101;
    for (int64_t i = 0; i < n; ++i) {
      if (rng() % 100 < pct) keep.push_back(i);
    }
    const CompactionPlan p = plan_compaction(n, keep, bs);
    EXPECT_EQ(simulate(n, p), keep);
    EXPECT_EQ(p.num_rows_after, static_cast<int64_t>(keep.size()));
    EXPECT_EQ(p.num_blocks_after, (static_cast<int64_t>(keep.size()) + bs - 1) / bs);
    std::set<int64_t> dst_blocks;
    for (const RowMove& m : p.moves) {
      EXPECT_LT(m.dst_row, m.src_row);
      dst_blocks.insert(m.dst_row / bs);
    }
    EXPECT_EQ(std::set<int64_t>(p.rewritten_blocks.begin(), p.rewritten_blocks.end()), dst_blocks);
    // Every row that ends in a different slot is a move; nothing else is.
    int64_t displaced = 0;
    for (size_t j = 0; j < keep.size(); ++j) displaced += keep[j] != static_cast<int64_t>(j);
    EXPECT_EQ(displaced, static_cast<int64_t>(p.moves.size()));
  }
}

TEST(Compaction, KeepBelowCutsAtTheFill) {
  EXPECT_EQ(keep_below({1, 3, 5, 8}, 5), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(keep_below({1, 3, 5, 8}, 100), (std::vector<int64_t>{1, 3, 5, 8}));
  EXPECT_TRUE(keep_below({1, 3}, 0).empty());
}

TEST(Compaction, BadKeepSetIsABug) {
  EXPECT_THROW(plan_compaction(5, {2, 1}, 4), InternalError);
  EXPECT_THROW(plan_compaction(5, {1, 5}, 4), InternalError);
  EXPECT_THROW(plan_compaction(5, {1, 1}, 4), InternalError);
}

}  // namespace
}  // namespace lorakv::cache
