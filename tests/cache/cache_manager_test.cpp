// tests/cache/cache_manager_test.cpp: the tensor-free bookkeeping: appends, copy-on-write,
// verified prefix sharing, residual adoption, compaction, query-before-mutate, shortfalls.
#include "lorakv/cache/cache_manager.h"

#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "lorakv/common/errors.h"

namespace lorakv::cache {
namespace {

const AdapterIdentity kA{sha256("adapter a")};
const AdapterIdentity kB{sha256("adapter b")};
const ContentKey kBase = ContentKey::base(StorageDtype::kFloat32);
const ContentKey kResA = ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, kA);

CacheConfig small_config(int64_t base_blocks = 64, int64_t heads_per_group = 1) {
  CacheConfig c;
  c.layout = {2, 2, 4, 4, heads_per_group};  // layers, kv heads, head_dim, block_size
  c.num_base_blocks = base_blocks;
  c.residual_pools = {{2, 64}, {3, 64}};
  return c;
}

// A lookup's writers: `writer` at each of the first `n` positions.
WriterRuns by(const AdapterIdentity& writer, int64_t n) { return WriterRuns::filled(n, writer); }

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(CacheManager, AppendFillsBlocksAndRecordsPositions) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  auto slots = m.append(SeqId(1), {iota_tokens(6), kA, {}});
  ASSERT_TRUE(slots);
  EXPECT_EQ(slots->first_position, 0);
  ASSERT_EQ(slots->base.size(), 4u);  // 2 layers x 2 heads
  const SequenceState& s = m.sequence(SeqId(1));
  for (const BaseLane& lane : s.lanes) {
    EXPECT_EQ(lane.table.num_rows, 6);
    EXPECT_EQ(lane.table.blocks.size(), 2u);
    EXPECT_EQ(lane.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  }
  EXPECT_EQ(m.allocator(0).num_used(), 8);
  // One full block per lane is indexed.
  EXPECT_EQ(m.index().num_entries(), 1);
  EXPECT_EQ(m.index().num_indexed_blocks(), 4);
}

TEST(CacheManager, ForkSharesAndCopiesOnWrite) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  ASSERT_TRUE(m.append(SeqId(1), {iota_tokens(6), kA, {}}));
  m.fork(SeqId(1), SeqId(2));
  EXPECT_EQ(m.allocator(0).num_used(), 8);  // nothing copied yet
  const BlockId shared_partial = m.sequence(SeqId(1)).lanes[0].table.blocks[1];
  EXPECT_EQ(m.allocator(0).refcount(shared_partial), 2);
  auto slots = m.append(SeqId(2), {{7}, kB, {}});
  ASSERT_TRUE(slots);
  EXPECT_EQ(slots->ops.copies.size(), 4u);  // the partial block of every lane
  const SequenceState& s1 = m.sequence(SeqId(1));
  const SequenceState& s2 = m.sequence(SeqId(2));
  EXPECT_EQ(s1.lanes[0].table.blocks[0], s2.lanes[0].table.blocks[0]);
  EXPECT_NE(s1.lanes[0].table.blocks[1], s2.lanes[0].table.blocks[1]);
  EXPECT_EQ(m.allocator(0).refcount(shared_partial), 1);
  EXPECT_EQ(slots->ops.copies[0].src, shared_partial);
  EXPECT_EQ(slots->base[0].slots[0], s2.lanes[0].table.blocks[1].value() * 4 + 2);
  m.release(SeqId(1));
  m.release(SeqId(2));
  EXPECT_EQ(m.allocator(0).num_used(), 0);
  // The indexed full block stays findable (cached); the partial blocks are free.
  EXPECT_EQ(m.index().num_entries(), 1);
  EXPECT_EQ(m.allocator(0).num_cached(), 4);
  EXPECT_EQ(m.allocator(0).num_free(), 64);
}

TEST(CacheManager, ReleasedPrefixStaysFindableUntilItsBlocksAreNeeded) {
  CacheManager m(small_config(/*base_blocks=*/16));  // 4 lanes of block_size 4
  m.create_sequence(SeqId(1), kBase);
  ASSERT_TRUE(m.append(SeqId(1), {iota_tokens(12), kA, {}}));  // 3 full blocks per lane
  m.release(SeqId(1));
  EXPECT_EQ(m.allocator(0).num_used(), 0);
  EXPECT_EQ(m.allocator(0).num_cached(), 12);
  EXPECT_EQ(m.allocator(0).num_free(), 16);  // cached blocks count as free

  // A new sequence with the same prefix takes the cached blocks back.
  PrefixMatch match = m.match_prefix(kBase, iota_tokens(14), by(kA, 14));
  ASSERT_EQ(match.num_tokens, 12);
  m.create_sequence(SeqId(2), kBase, match);
  EXPECT_EQ(m.allocator(0).num_cached(), 0);
  EXPECT_EQ(m.allocator(0).num_used(), 12);
  EXPECT_EQ(m.allocator(0).refcount(m.sequence(SeqId(2)).lanes[1].table.blocks[2]), 1);
  m.release(SeqId(2));

  // Other rows need 8 blocks: the 4 free ones go first, then cached ones from the chain's
  // tail: the third block of every lane (one index entry) goes, the first two stay.
  m.create_sequence(SeqId(3), kBase);
  ASSERT_TRUE(m.append(SeqId(3), {iota_tokens(8, 500), kB, {}}));
  EXPECT_EQ(m.match_prefix(kBase, iota_tokens(14), by(kA, 14)).num_tokens, 8);
  EXPECT_EQ(m.allocator(0).num_cached(), 8);
  EXPECT_EQ(m.allocator(0).num_used(), 8);
  // When every block is needed, the rest of the chain goes too and nothing stale is findable.
  m.create_sequence(SeqId(4), kBase);
  ASSERT_TRUE(m.append(SeqId(4), {iota_tokens(8, 900), kB, {}}));
  EXPECT_EQ(m.match_prefix(kBase, iota_tokens(14), by(kA, 14)).num_tokens, 0);
  EXPECT_EQ(m.allocator(0).num_cached(), 0);
  EXPECT_EQ(m.index().num_entries(), 4);  // the two new sequences' own blocks
}

TEST(CacheManager, PrefixIsVerifiedByTokensAndKey) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  ASSERT_TRUE(m.append(SeqId(1), {iota_tokens(10), kA, {}}));
  std::vector<int32_t> query = iota_tokens(12);
  PrefixMatch match = m.match_prefix(kBase, query, by(kA, 12));
  EXPECT_EQ(match.num_tokens, 8);  // whole blocks only
  query[5] = 0;  // diverges inside the second block
  EXPECT_EQ(m.match_prefix(kBase, query, by(kA, 12)).num_tokens, 4);
  query[0] = 0;
  EXPECT_EQ(m.match_prefix(kBase, query, by(kA, 12)).num_tokens, 0);
  // Same tokens, another writer, dtype or adapter in the rows: nothing. Writers named for
  // fewer positions than a block: nothing past them.
  EXPECT_EQ(m.match_prefix(kBase, iota_tokens(12), by(kB, 12)).num_tokens, 0);
  EXPECT_EQ(m.match_prefix(kBase, iota_tokens(12), by(kA, 12)).num_tokens, 8);
  EXPECT_EQ(m.match_prefix(kBase, iota_tokens(12), by(kA, 7)).num_tokens, 4);
  WriterRuns second_block_by_b = by(kA, 12);
  second_block_by_b.fill(5, 6, kB);
  EXPECT_EQ(m.match_prefix(kBase, iota_tokens(12), second_block_by_b).num_tokens, 4);
  EXPECT_EQ(m.match_prefix(ContentKey::base_with_adapter(StorageDtype::kFloat32, kA), iota_tokens(12), by(kA, 12)).num_tokens, 0);
  // A new sequence shares the matched blocks and continues past them.
  m.create_sequence(SeqId(2), kBase, match);
  const SequenceState& s2 = m.sequence(SeqId(2));
  EXPECT_EQ(s2.tokens, iota_tokens(8));
  EXPECT_EQ(s2.lanes[3].table.blocks, std::vector<BlockId>(m.sequence(SeqId(1)).lanes[3].table.blocks.begin(),
                                                          m.sequence(SeqId(1)).lanes[3].table.blocks.begin() + 2));
  EXPECT_EQ(m.allocator(0).refcount(s2.lanes[3].table.blocks[1]), 2);
  auto slots = m.append(SeqId(2), {{1, 2}, kB, {}});
  ASSERT_TRUE(slots);
  EXPECT_EQ(slots->first_position, 8);
  EXPECT_TRUE(slots->ops.copies.empty());  // the matched blocks are full: new blocks, no copy
}

TEST(CacheManager, ResidualRowsAreAdoptedOnlyForTheSameAdapter) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  EXPECT_EQ(m.attach_residual(SeqId(1), kResA, {2, 3}, {}), 0);
  auto slots = m.append(SeqId(1), {iota_tokens(9), kA, {{kResA, 9}}});
  ASSERT_TRUE(slots);
  ASSERT_EQ(slots->residual.size(), 1u);
  EXPECT_EQ(slots->residual[0][0].pool, 1);  // layer 0: rank 2
  EXPECT_EQ(slots->residual[0][2].pool, 2);  // layer 1: rank 3
  EXPECT_EQ(m.allocator(1).num_used(), 2 * 3);  // 2 heads x 3 blocks at layer 0
  PrefixMatch match = m.match_prefix(kBase, iota_tokens(9), by(kA, 9));
  m.create_sequence(SeqId(2), kBase, match);
  m.create_sequence(SeqId(3), kBase, match);
  EXPECT_EQ(m.attach_residual(SeqId(3), kResA, {2, 3}, by(kB, 9)), 0) << "rows kA wrote, not kB";
  EXPECT_EQ(m.attach_residual(SeqId(2), kResA, {2, 3}, by(kA, 9)), 8);
  const ContentKey res_b = ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, kB);
  EXPECT_EQ(m.attach_residual(SeqId(2), res_b, {2, 3}, by(kA, 9)), 0);
  EXPECT_EQ(m.residual(SeqId(2), kResA).lanes[1].blocks, std::vector<BlockId>(m.residual(SeqId(1), kResA).lanes[1].blocks.begin(),
                                                                              m.residual(SeqId(1), kResA).lanes[1].blocks.begin() + 2));
  // The agent catches up from position 8 to the sequence's end.
  auto more = m.append(SeqId(2), {{}, kA, {{kResA, 0}, {res_b, 8}}});
  ASSERT_TRUE(more);
  EXPECT_EQ(more->residual[1][0].token_offsets.size(), 8u);
}

// An identity as adapters/ computes one: SHA-256 over the adapter's content. Computed
// twice from the same bytes (two loads, two processes) it is the same identity.
AdapterIdentity identity_of_content(const std::string& content) {
  Sha256 h;
  h.update_string("test adapter");
  h.update_string(content);
  return {h.finish()};
}

// Rows are keyed by identity alone: equal identities share base and residual rows,
// identities of different content never do.
TEST(CacheManager, RowsAreSharedForEqualIdentityAndNeverForDifferent) {
  const AdapterIdentity loaded = identity_of_content("A and B bytes");
  const AdapterIdentity reloaded = identity_of_content("A and B bytes");
  const AdapterIdentity changed = identity_of_content("A and B bytez");  // one byte differs
  ASSERT_EQ(loaded, reloaded);
  auto res = [](const AdapterIdentity& id) { return ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, id); };
  auto full = [](const AdapterIdentity& id) { return ContentKey::base_with_adapter(StorageDtype::kFloat32, id); };
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  m.attach_residual(SeqId(1), res(loaded), {2, 3}, {});
  ASSERT_TRUE(m.append(SeqId(1), {iota_tokens(9), loaded, {{res(loaded), 9}}}));
  m.create_sequence(SeqId(2), full(loaded));
  ASSERT_TRUE(m.append(SeqId(2), {iota_tokens(9), loaded, {}}));

  // Base rows: the writers and full mode's key both compare identities.
  EXPECT_EQ(m.match_prefix(kBase, iota_tokens(9), by(reloaded, 9)).num_tokens, 8);
  EXPECT_EQ(m.match_prefix(kBase, iota_tokens(9), by(changed, 9)).num_tokens, 0);
  EXPECT_EQ(m.match_prefix(full(reloaded), iota_tokens(9), by(reloaded, 9)).num_tokens, 8);
  EXPECT_EQ(m.match_prefix(full(changed), iota_tokens(9), by(changed, 9)).num_tokens, 0);
  // Residual rows: adopted under the reloaded identity, never under the changed one.
  m.create_sequence(SeqId(3), kBase, m.match_prefix(kBase, iota_tokens(9), by(reloaded, 9)));
  EXPECT_EQ(m.attach_residual(SeqId(3), res(reloaded), {2, 3}, by(reloaded, 9)), 8);
  EXPECT_EQ(m.residual(SeqId(3), res(reloaded)).lanes[0].blocks[0], m.residual(SeqId(1), res(loaded)).lanes[0].blocks[0]);
  EXPECT_EQ(m.attach_residual(SeqId(3), res(changed), {2, 3}, by(reloaded, 9)), 0);
}

TEST(CacheManager, ShortfallIsAValueAndQueriesArePure) {
  CacheManager m(small_config(/*base_blocks=*/6));
  m.create_sequence(SeqId(1), kBase);
  const AppendRequest big{iota_tokens(8), kA, {}};  // 4 lanes x 2 blocks = 8 > 6
  Capacity cap = m.can_append(SeqId(1), big);
  EXPECT_FALSE(cap.ok);
  EXPECT_EQ(cap.blocks_needed[0], 8);
  EXPECT_EQ(cap.blocks_free[0], 6);
  EXPECT_FALSE(m.append(SeqId(1), big));
  EXPECT_EQ(m.allocator(0).num_used(), 0);
  EXPECT_TRUE(m.sequence(SeqId(1)).tokens.empty());
  ASSERT_TRUE(m.append(SeqId(1), {iota_tokens(4), kA, {}}));
  cap = m.can_append(SeqId(1), {{1, 2}, kA, {}});  // a new block in each of 4 lanes, 2 free
  EXPECT_FALSE(cap.ok);
  EXPECT_EQ(cap.blocks_needed[0], 4);
  EXPECT_EQ(m.allocator(0).num_used(), 4);
  EXPECT_EQ(m.sequence(SeqId(1)).tokens.size(), 4u);
  EXPECT_EQ(m.sequence(SeqId(1)).num_positions, 4);
}

TEST(CacheManager, CompactionFreesBlocksPerHeadAndLeavesTheIndex) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  m.attach_residual(SeqId(1), kResA, {2, 0}, {});  // v adapted at layer 0 only
  ASSERT_TRUE(m.append(SeqId(1), {iota_tokens(12), kA, {{kResA, 12}}}));
  EXPECT_EQ(m.allocator(0).num_used(), 12);
  EXPECT_EQ(m.allocator(1).num_used(), 6);
  // Lane 0 (layer 0, head 0) keeps 3 rows, lane 1 all, lane 2 rows 0..3, lane 3 nothing.
  KeepSets keep{{1, 6, 11}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {0, 1, 2, 3}, {}};
  auto ops = m.compact(SeqId(1), keep);
  ASSERT_TRUE(ops);
  const SequenceState& s = m.sequence(SeqId(1));
  EXPECT_EQ(s.lanes[0].positions, (std::vector<int32_t>{1, 6, 11}));
  EXPECT_EQ(s.lanes[0].table.blocks.size(), 1u);
  EXPECT_EQ(s.lanes[1].table.num_rows, 12);
  EXPECT_EQ(s.lanes[2].table.blocks.size(), 1u);
  EXPECT_EQ(s.lanes[3].table.blocks.size(), 0u);
  EXPECT_EQ(m.allocator(0).num_used(), 1 + 3 + 1 + 0);
  EXPECT_EQ(m.allocator(1).num_used(), 1 + 3);  // residual follows its lane
  EXPECT_EQ(m.residual(SeqId(1), kResA).lanes[0].num_rows, 3);
  EXPECT_EQ(ops->moves.size(), 3u * 2);  // rows 1, 6 and 11 of lane 0 move, in base and residual
  // Every entry held a block that moved or was freed, so nothing stays indexed... except
  // entries whose blocks all survive in place: none here (lane 3 lost everything).
  EXPECT_EQ(m.index().num_entries(), 0);
  EXPECT_FALSE(s.indexable);
}

TEST(CacheManager, CompactingASharedBlockCopiesItFirst) {
  CacheManager m(small_config());
  m.create_sequence(SeqId(1), kBase);
  ASSERT_TRUE(m.append(SeqId(1), {iota_tokens(8), kA, {}}));
  m.fork(SeqId(1), SeqId(2));
  const std::vector<BlockId> before = m.sequence(SeqId(1)).lanes[0].table.blocks;
  KeepSets keep{{0, 2, 5}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}};
  Capacity cap = m.can_compact(SeqId(2), keep);
  EXPECT_TRUE(cap.ok);
  EXPECT_EQ(cap.blocks_needed[0], 1);
  auto ops = m.compact(SeqId(2), keep);
  ASSERT_TRUE(ops);
  ASSERT_EQ(ops->copies.size(), 1u);
  EXPECT_EQ(ops->copies[0].src, before[0]);
  EXPECT_EQ(m.sequence(SeqId(1)).lanes[0].table.blocks, before);  // the other sequence is untouched
  EXPECT_EQ(m.allocator(0).refcount(before[0]), 1);
  EXPECT_EQ(m.allocator(0).refcount(before[1]), 1);
  // Sequence 1's blocks never changed, so its prefix stays matchable.
  EXPECT_EQ(m.match_prefix(kBase, iota_tokens(8), by(kA, 8)).num_tokens, 8);
}

// Positions are int32 in the lanes and the kernel's views: the append that would need
// position 2^31 is refused with the position named, before anything changes; up to
// 2^31 - 1 is fine.
TEST(CacheManager, PositionPastInt32IsRefusedNotWrapped) {
  CacheManager m(small_config());
  const int64_t last = std::numeric_limits<int32_t>::max();
  m.create_suffix_sequence(SeqId(1), kBase, last - 1);
  ASSERT_TRUE(m.append(SeqId(1), {iota_tokens(2), kA, {}}));
  EXPECT_EQ(m.sequence(SeqId(1)).lanes[0].positions.back(), last);
  const int64_t used = m.allocator(0).num_used();
  try {
    m.append(SeqId(1), {iota_tokens(1), kA, {}});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("position 2147483648"), std::string::npos) << e.what();
  }
  EXPECT_EQ(m.sequence(SeqId(1)).num_positions, 2);
  EXPECT_EQ(m.allocator(0).num_used(), used);
}

}  // namespace
}  // namespace lorakv::cache
