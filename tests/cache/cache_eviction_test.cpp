// tests/cache/cache_eviction_test.cpp: eviction without moving rows (CacheManager::evict):
// whole blocks dropped and their references released, the rest masked; residual rows leave
// with their base rows and stay aligned through later appends; shared blocks are never
// copied; the prefix index keeps only blocks with every row; masks and scores follow
// appends and packing; bad keep sets are refused.
#include <gtest/gtest.h>

#include <numeric>

#include "lorakv/cache/cache_manager.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache {
namespace {

const AdapterIdentity kA{sha256("adapter a")};
const ContentKey kBase = ContentKey::base(StorageDtype::kFloat32);
const ContentKey kResA = ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, kA);

// 2 layers x 2 KV heads, one head per lane (4 lanes), blocks of 4 rows.
CacheConfig small_config() {
  CacheConfig c;
  c.layout = {2, 2, 4, 4, 1};
  c.num_base_blocks = 64;
  c.residual_pools = {{2, 64}};
  return c;
}

std::vector<int32_t> tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

std::vector<int64_t> rows(std::initializer_list<int64_t> r) { return r; }

KeepSets same_keep(const CacheManager& m, std::vector<int64_t> keep) {
  return KeepSets(static_cast<size_t>(m.layout().num_lanes()), keep);
}

TEST(CacheEviction, MasksRowsAndDropsBlocksThatKeepNoRow) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  ASSERT_TRUE(m.append(SeqId(1), {tokens(12), kA, {}}));
  ASSERT_EQ(m.allocator(0).num_used(), 12);
  KeepSets keep = same_keep(m, {0, 1, 2, 3, 9, 10, 11});  // block 1 keeps nothing, block 2 loses row 8
  keep[1] = {0, 5, 11};                                      // lane 1 keeps a row in every block
  const EvictionOutcome out = m.evict(SeqId(1), keep);
  EXPECT_EQ(out.rows_evicted, 5 + 9 + 5 + 5);
  EXPECT_EQ(out.blocks_dropped, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(out.rows_masked, 1 + 9 + 1 + 1);
  EXPECT_EQ(m.allocator(0).num_used(), 9) << "the three dropped blocks are free again";
  const SequenceState& s = m.sequence(SeqId(1));
  EXPECT_EQ(s.lanes[0].table.num_rows, 8);
  EXPECT_EQ(s.lanes[0].positions, (std::vector<int32_t>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(s.lanes[0].live, (std::vector<uint8_t>{1, 1, 1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(m.live_rows(SeqId(1), 0), rows({0, 1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(s.lanes[1].table.num_rows, 12);
  EXPECT_EQ(s.lanes[1].num_live(), 3);
  EXPECT_EQ(m.live_rows(SeqId(1), 1), rows({0, 5, 11}));
  // A second eviction takes live rows only, and may empty a block that was partly masked.
  const EvictionOutcome again = m.evict(SeqId(1), same_keep(m, {}));
  EXPECT_EQ(again.rows_evicted, 7 + 3 + 7 + 7);
  EXPECT_EQ(m.allocator(0).num_used(), 0);
  EXPECT_EQ(m.sequence(SeqId(1)).lanes[1].table.num_rows, 0);
  EXPECT_TRUE(m.sequence(SeqId(1)).lanes[1].live.empty());
}

TEST(CacheEviction, ResidualRowsLeaveWithTheirBaseRowsAndStayAligned) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  m.attach_residual(SeqId(1), kResA, {2, 2}, {});
  // The stream covers 6 of 12 positions: its lanes end inside block 1.
  ASSERT_TRUE(m.append(SeqId(1), {tokens(12), kA, {{kResA, 6}}}));
  ASSERT_EQ(m.allocator(1).num_used(), 4 * 2);
  m.evict(SeqId(1), same_keep(m, {0, 1, 2, 3, 8, 9, 10, 11}));  // block 1 goes in every lane
  const SequenceState& s = m.sequence(SeqId(1));
  for (int64_t lane = 0; lane < 4; ++lane) {
    EXPECT_EQ(s.lanes[static_cast<size_t>(lane)].table.num_rows, 8);
    EXPECT_EQ(s.residuals[0].lanes[static_cast<size_t>(lane)].num_rows, 4) << "the residual rows of block 1 left with it";
  }
  EXPECT_EQ(m.allocator(1).num_used(), 4);
  // Catching up covers positions 6..11; only 8..11 still have base rows.
  auto slots = m.append(SeqId(1), {{}, kA, {{kResA, 6}}});
  ASSERT_TRUE(slots);
  EXPECT_EQ(slots->residual[0][0].token_offsets, rows({2, 3, 4, 5}));
  for (int64_t lane = 0; lane < 4; ++lane) {
    EXPECT_EQ(m.sequence(SeqId(1)).residuals[0].lanes[static_cast<size_t>(lane)].num_rows, 8) << "one C row per base row";
  }
  // New tokens with their residual rows land after the survivors.
  ASSERT_TRUE(m.append(SeqId(1), {tokens(3, 500), kA, {{kResA, 3}}}));
  EXPECT_EQ(m.sequence(SeqId(1)).lanes[2].positions.back(), 14);
  EXPECT_EQ(m.sequence(SeqId(1)).residuals[0].lanes[2].num_rows, 11);
}

TEST(CacheEviction, SharedBlocksAreReleasedNeverCopied) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  ASSERT_TRUE(m.append(SeqId(1), {tokens(8), kA, {}}));
  m.fork(SeqId(1), SeqId(2));
  const BlockId first = m.sequence(SeqId(1)).lanes[0].table.blocks[0];
  const BlockId second = m.sequence(SeqId(1)).lanes[0].table.blocks[1];
  // Sequence 2 drops block 1 and masks a row of block 0: nothing is copied or freed.
  m.evict(SeqId(2), same_keep(m, {0, 2, 3}));
  EXPECT_EQ(m.allocator(0).num_used(), 8);
  EXPECT_EQ(m.allocator(0).refcount(second), 1);
  EXPECT_EQ(m.sequence(SeqId(2)).lanes[0].table.blocks, std::vector<BlockId>{first}) << "block 0 kept, not copied";
  EXPECT_TRUE(m.sequence(SeqId(1)).lanes[0].live.empty()) << "the other sequence sees every row";
  EXPECT_EQ(m.sequence(SeqId(1)).lanes[0].table.num_rows, 8);
  // Once sequence 1 lets block 1 go too, it is free.
  m.evict(SeqId(1), same_keep(m, {0, 1, 2, 3}));
  EXPECT_EQ(m.allocator(0).num_used(), 4);
  EXPECT_EQ(m.allocator(0).num_cached(), 0) << "a block with evicted rows is not kept for reuse";
}

TEST(CacheEviction, IndexKeepsOnlyBlocksWithEveryRow) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  ASSERT_TRUE(m.append(SeqId(1), {tokens(12), kA, {}}));
  ASSERT_EQ(m.index().num_entries(), 3);
  KeepSets keep = same_keep(m, rows({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  keep[3] = {0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11};  // one row of block 1, in one lane
  m.evict(SeqId(1), keep);
  EXPECT_EQ(m.index().num_entries(), 1) << "block 1 and what depends on it left the index";
  EXPECT_EQ(m.sequence(SeqId(1)).base_chain.size(), 1u);
  EXPECT_FALSE(m.sequence(SeqId(1)).indexable);
  EXPECT_EQ(m.match_prefix(kBase, tokens(12), WriterRuns::filled(12, kA)).num_tokens, 4)
      << "only the intact first block matches";
  ASSERT_TRUE(m.append(SeqId(1), {tokens(4, 200), kA, {}}));
  EXPECT_EQ(m.index().num_entries(), 1) << "rows written after an eviction are never indexed";
}

TEST(CacheEviction, MaskAndScoresFollowAppendsAndPacking) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  ASSERT_TRUE(m.append(SeqId(1), {tokens(6), kA, {}}));
  const float mass[6] = {1, 2, 3, 4, 5, 6};
  for (int64_t lane = 0; lane < 4; ++lane) m.add_scores(SeqId(1), lane, mass, 6);
  m.add_scores(SeqId(1), 0, mass, 3);
  m.evict(SeqId(1), same_keep(m, {0, 2, 4, 5}));
  ASSERT_TRUE(m.append(SeqId(1), {tokens(2, 300), kA, {}}));
  const BaseLane& lane = m.sequence(SeqId(1)).lanes[0];
  EXPECT_EQ(lane.live, (std::vector<uint8_t>{1, 0, 1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(lane.scores, (std::vector<float>{2, 4, 6, 4, 5, 6, 0, 0}));
  KeepSets live(4);
  for (int64_t l = 0; l < 4; ++l) live[static_cast<size_t>(l)] = m.live_rows(SeqId(1), l);
  ASSERT_TRUE(m.compact(SeqId(1), live));
  const BaseLane& packed = m.sequence(SeqId(1)).lanes[0];
  EXPECT_TRUE(packed.live.empty());
  EXPECT_EQ(packed.num_evicted, 0);
  EXPECT_EQ(packed.positions, (std::vector<int32_t>{0, 2, 4, 5, 6, 7}));
  EXPECT_EQ(packed.scores, (std::vector<float>{2, 6, 5, 6, 0, 0}));
  EXPECT_EQ(m.allocator(0).num_used(), 4 * 2);
}

// The writer of position t in the test below: two writers taking turns of 5 tokens.
AdapterIdentity turn_writer(int64_t t) { return (t / 5) % 2 ? kA : AdapterIdentity::base_model(); }

TEST(CacheEviction, AnEvictedHistoryCostsNoHostBytesPerToken) {
  // A sliding window (2 sinks + 6 recent rows) over 3,000 one-token appends: the token list
  // goes at the first eviction and the writer runs shrink to the held rows', so the host
  // metadata after 3,000 tokens is no more than after 1,000 (it grew by 68 bytes a token
  // with a token id and a 32-byte writer identity per position, and one per residual row).
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  (void)m.attach_residual(SeqId(1), kResA, {2, 2}, {});
  constexpr int64_t kSinks = 2, kWindow = 6, kTokens = 3000;
  int64_t at_1000 = 0;
  for (int64_t t = 0; t < kTokens; ++t) {
    ASSERT_TRUE(m.append(SeqId(1), {{static_cast<int32_t>(t)}, turn_writer(t), {{kResA, 1}}}));
    KeepSets keep(4);
    for (int64_t lane = 0; lane < 4; ++lane) {
      const std::vector<int32_t>& positions = m.sequence(SeqId(1)).lanes[static_cast<size_t>(lane)].positions;
      for (int64_t row : m.live_rows(SeqId(1), lane)) {
        const int32_t p = positions[static_cast<size_t>(row)];
        if (p < kSinks || p > t - kWindow) keep[static_cast<size_t>(lane)].push_back(row);
      }
    }
    (void)m.evict(SeqId(1), keep);
    if (t == 999) at_1000 = m.host_metadata_bytes();
  }
  const SequenceState& s = m.sequence(SeqId(1));
  EXPECT_EQ(s.num_positions, kTokens);
  EXPECT_TRUE(s.tokens.empty());
  EXPECT_FALSE(s.keeps_tokens);
  EXPECT_LE(s.writers.num_runs(), 4) << "sinks' writer, then at most 3 turns in the window";
  EXPECT_LE(m.host_metadata_bytes(), at_1000);
  // Held positions keep their own writers, in the base and the residual stream.
  const ResidualStream& r = m.residual(SeqId(1), kResA);
  for (int64_t p : {int64_t{0}, int64_t{1}, kTokens - 6, kTokens - 4, kTokens - 1}) {
    EXPECT_EQ(s.writers[p], turn_writer(p)) << p;
    EXPECT_EQ(r.writers[p], turn_writer(p)) << p;
  }
  EXPECT_EQ(m.live_rows(SeqId(1), 0).size(), static_cast<size_t>(kSinks + kWindow));
}

TEST(CacheEviction, RefusesBadKeepSets) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  ASSERT_TRUE(m.append(SeqId(1), {tokens(8), kA, {}}));
  m.evict(SeqId(1), same_keep(m, {0, 2, 3, 4, 5, 6, 7}));
  EXPECT_THROW(m.evict(SeqId(1), same_keep(m, {0, 1})), InternalError) << "row 1 was evicted";
  EXPECT_THROW(m.evict(SeqId(1), same_keep(m, {2, 0})), InternalError) << "not ascending";
  EXPECT_THROW(m.evict(SeqId(1), same_keep(m, {0, 9})), InternalError) << "past the rows";
  EXPECT_THROW(m.evict(SeqId(1), KeepSets(2)), InternalError) << "one keep set per lane";
  m.create_suffix_sequence(SeqId(2), kBase, 8);
  EXPECT_THROW(m.evict(SeqId(2), same_keep(m, {})), InternalError) << "private rows are never evicted";
  // Nothing changed by the refusals.
  EXPECT_EQ(m.live_rows(SeqId(1), 0), rows({0, 2, 3, 4, 5, 6, 7}));
}

}  // namespace
}  // namespace lorakv::cache
