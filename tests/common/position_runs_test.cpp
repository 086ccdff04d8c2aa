// tests/common/position_runs_test.cpp: PositionRuns against a plain per-position vector
// (values, run ends, slices), run merging, and refused positions.
#include "lorakv/common/position_runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "lorakv/common/errors.h"

namespace lorakv {
namespace {

TEST(PositionRuns, EqualNeighboursShareOneRun) {
  PositionRuns<int> runs;
  runs.append(3, 7);
  runs.append(2, 7);  // merged: same value
  runs.append(0, 9);  // nothing
  runs.append(1, 9);
  runs.append(4, 7);
  EXPECT_EQ(runs.size(), 10);
  EXPECT_EQ(runs.num_runs(), 3);
  EXPECT_EQ(runs.expand(), (std::vector<int>{7, 7, 7, 7, 7, 9, 7, 7, 7, 7}));
  EXPECT_EQ(runs.run_end(0, 10), 5);
  EXPECT_EQ(runs.run_end(4, 10), 5);
  EXPECT_EQ(runs.run_end(5, 10), 6);
  EXPECT_EQ(runs.run_end(6, 10), 10);
  EXPECT_EQ(runs.run_end(6, 8), 8);  // capped
}

TEST(PositionRuns, MatchesAPlainVectorOnRandomAppends) {
  std::mt19937 rng(5);
  PositionRuns<int> runs;
  std::vector<int> plain;
  for (int step = 0; step < 400; ++step) {
    const int n = static_cast<int>(rng() % 6);
    const int value = static_cast<int>(rng() % 3);
    if (rng() % 4 == 0) {
      PositionRuns<int> more = PositionRuns<int>::from(std::vector<int>(static_cast<size_t>(n), value));
      more.append(1, value + 1);
      runs.append(more);
      plain.insert(plain.end(), static_cast<size_t>(n), value);
      plain.push_back(value + 1);
    } else {
      runs.append(n, value);
      plain.insert(plain.end(), static_cast<size_t>(n), value);
    }
  }
  ASSERT_EQ(runs.size(), static_cast<int64_t>(plain.size()));
  EXPECT_EQ(runs.expand(), plain);
  EXPECT_EQ(runs, PositionRuns<int>::from(plain));  // one canonical form
  for (int64_t p = 0; p < runs.size(); ++p) {
    ASSERT_EQ(runs[p], plain[static_cast<size_t>(p)]) << p;
    int64_t end = p + 1;
    while (end < runs.size() && plain[static_cast<size_t>(end)] == plain[static_cast<size_t>(p)]) ++end;
    ASSERT_EQ(runs.run_end(p, runs.size()), end) << p;
  }
  for (int trial = 0; trial < 50; ++trial) {
    const auto a = static_cast<int64_t>(rng() % plain.size());
    const int64_t b = a + static_cast<int64_t>(rng() % (plain.size() - static_cast<size_t>(a) + 1));
    EXPECT_EQ(runs.slice(a, b), std::vector<int>(plain.begin() + a, plain.begin() + b));
  }
  // Runs, not positions, cost bytes: far fewer runs than positions here.
  EXPECT_LT(runs.num_runs(), runs.size() / 2);
}

TEST(PositionRuns, FillSplitsAndMergesRunsLikeAVector) {
  std::mt19937 rng(9);
  std::vector<int> plain;
  for (int i = 0; i < 60; ++i) plain.push_back(static_cast<int>(i / 7 % 3));
  PositionRuns<int> runs = PositionRuns<int>::from(plain);
  for (int trial = 0; trial < 300; ++trial) {
    const auto a = static_cast<int64_t>(rng() % (plain.size() + 1));
    const int64_t b = a + static_cast<int64_t>(rng() % (plain.size() - static_cast<size_t>(a) + 1));
    const int value = static_cast<int>(rng() % 3);
    runs.fill(a, b, value);
    std::fill(plain.begin() + a, plain.begin() + b, value);
    ASSERT_EQ(runs.expand(), plain) << "trial " << trial;
    ASSERT_EQ(runs, PositionRuns<int>::from(plain)) << "runs not merged after trial " << trial;
  }
  runs.fill(3, 3, 9);  // empty: nothing
  EXPECT_EQ(runs.expand(), plain);
  EXPECT_THROW(runs.fill(5, 61, 1), InternalError);
}

TEST(PositionRuns, ForgottenRangesTakeANeighboursValueSoRunsMerge) {
  // Writers of a streaming context: sinks 0..1 by 1, then turns of 2 and 3; positions 2..7
  // and 10..11 evicted everywhere.
  PositionRuns<int> runs = PositionRuns<int>::from({1, 1, 2, 2, 3, 3, 2, 2, 3, 3, 2, 2, 3, 3});
  runs.forget({{2, 8}, {10, 12}});
  EXPECT_EQ(runs.expand(), (std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3}));
  EXPECT_EQ(runs.num_runs(), 2);
  // At 0 the right neighbour's value; a range reaching the end keeps what it has.
  PositionRuns<int> head = PositionRuns<int>::from({4, 5, 6, 7});
  head.forget({{0, 2}, {3, 4}});
  EXPECT_EQ(head.expand(), (std::vector<int>{6, 6, 6, 6}));
  PositionRuns<int> all = PositionRuns<int>::from({4, 5});
  all.forget({{0, 2}});
  EXPECT_EQ(all.expand(), (std::vector<int>{4, 5}));
}

TEST(PositionRuns, PositionsOutsideAreRefused) {
  PositionRuns<int> runs;
  EXPECT_THROW((void)runs[0], InternalError);
  runs.append(2, 1);
  EXPECT_THROW((void)runs[2], InternalError);
  EXPECT_THROW((void)runs[-1], InternalError);
  EXPECT_THROW((void)runs.slice(1, 3), InternalError);
  EXPECT_THROW(runs.append(-1, 1), InternalError);
  EXPECT_EQ(runs.slice(2, 2), std::vector<int>{});
}

}  // namespace
}  // namespace lorakv
