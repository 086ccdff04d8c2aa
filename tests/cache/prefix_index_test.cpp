// tests/cache/prefix_index_test.cpp: exact keys (the writer of every row included), chaining,
// cascading erase.
#include "lorakv/cache/prefix_index.h"

#include <gtest/gtest.h>

namespace lorakv::cache {
namespace {

const AdapterIdentity kAgentA{sha256("agent a")};
const AdapterIdentity kAgentB{sha256("agent b")};

// Base rows of `tokens`, every row by `writer`.
PrefixEntryKey base_key(EntryId parent, std::vector<int32_t> tokens, StorageDtype dtype = StorageDtype::kFloat32,
                        const AdapterIdentity& writer = kAgentA) {
  std::vector<AdapterIdentity> writers(tokens.size(), writer);
  return {parent, EntryId(), ContentKey::base(dtype), std::move(tokens), std::move(writers)};
}

PrefixEntryKey residual_key(EntryId parent, EntryId base, const ContentKey& key, std::vector<AdapterIdentity> writers) {
  return {parent, base, key, {}, std::move(writers)};
}

TEST(PrefixIndex, FindsOnlyExactKeys) {
  PrefixIndex index;
  auto [e0, inserted] = index.insert(base_key(EntryId(), {1, 2, 3, 4}), {{0, BlockId(10)}});
  EXPECT_TRUE(inserted);
  EXPECT_EQ(index.find(base_key(EntryId(), {1, 2, 3, 4})), e0);
  EXPECT_FALSE(index.find(base_key(EntryId(), {1, 2, 3, 5})));                        // one token differs
  EXPECT_FALSE(index.find(base_key(EntryId(), {1, 2, 3, 4}, StorageDtype::kBFloat16)));  // dtype
  PrefixEntryKey with_adapter = base_key(EntryId(), {1, 2, 3, 4});
  with_adapter.key = ContentKey::base_with_adapter(StorageDtype::kFloat32, kAgentA);  // full mode's own rows
  EXPECT_FALSE(index.find(with_adapter));
  EXPECT_FALSE(index.find(base_key(e0, {1, 2, 3, 4})));  // same tokens, other prefix
  EXPECT_EQ(index.entry_of({0, BlockId(10)}), e0);
  EXPECT_FALSE(index.entry_of({1, BlockId(10)}));  // same id, other pool
}

// The writers are part of the key, row by row: a block with one row by another writer is
// another entry, and a lookup finds only the one whose every row has the writer it names.
TEST(PrefixIndex, EveryRowsWriterIsPartOfTheKey) {
  PrefixIndex index;
  PrefixEntryKey mixed_key = base_key(EntryId(), {7, 8});
  mixed_key.writers[1] = kAgentB;
  const EntryId mixed = index.insert(mixed_key, {{0, BlockId(1)}}).first;
  EXPECT_EQ(index.find(mixed_key), mixed);
  EXPECT_FALSE(index.find(base_key(EntryId(), {7, 8})));
  const EntryId pure = index.insert(base_key(EntryId(), {7, 8}), {{0, BlockId(2)}}).first;
  EXPECT_NE(pure, mixed);
  EXPECT_EQ(index.find(base_key(EntryId(), {7, 8})), pure);
  EXPECT_EQ(index.find(mixed_key), mixed);
  EXPECT_FALSE(index.find(base_key(EntryId(), {7, 8}, StorageDtype::kFloat32, AdapterIdentity::base_model())));
  EXPECT_FALSE(index.find(base_key(EntryId(), {7, 8}, StorageDtype::kFloat32, kAgentB)));
}

TEST(PrefixIndex, DuplicateInsertReturnsTheExistingEntry) {
  PrefixIndex index;
  auto first = index.insert(base_key(EntryId(), {5}), {{0, BlockId(1)}});
  auto again = index.insert(base_key(EntryId(), {5}), {{0, BlockId(2)}});
  EXPECT_FALSE(again.second);
  EXPECT_EQ(again.first, first.first);
  EXPECT_FALSE(index.entry_of({0, BlockId(2)}));
  EXPECT_EQ(index.num_entries(), 1);
}

TEST(PrefixIndex, ResidualEntriesAreKeyedByAdapterBaseEntryAndWriters) {
  PrefixIndex index;
  const EntryId base = index.insert(base_key(EntryId(), {1, 2}), {{0, BlockId(0)}}).first;
  const ContentKey res_a = ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, kAgentA);
  const ContentKey res_b = ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, kAgentB);
  const ContentKey res_a_k = ContentKey::residual(StreamKind::kResidualK, StorageDtype::kFloat32, kAgentA);
  const std::vector<AdapterIdentity> by_a = {kAgentA, kAgentA};
  const EntryId r = index.insert(residual_key(EntryId(), base, res_a, by_a), {{1, BlockId(0)}}).first;
  EXPECT_EQ(index.find(residual_key(EntryId(), base, res_a, by_a)), r);
  EXPECT_FALSE(index.find(residual_key(EntryId(), base, res_b, by_a)));    // a reloaded/other adapter
  EXPECT_FALSE(index.find(residual_key(EntryId(), base, res_a_k, by_a)));  // another module
  EXPECT_FALSE(index.find(residual_key(EntryId(), EntryId(99), res_a, by_a)));
  EXPECT_FALSE(index.find(residual_key(EntryId(), base, res_a, {kAgentA, kAgentB})));  // another writer's C
}

TEST(PrefixIndex, ErasingABlockRemovesItsEntryAndDependents) {
  PrefixIndex index;
  const EntryId e0 = index.insert(base_key(EntryId(), {1}), {{0, BlockId(0)}, {0, BlockId(1)}}).first;
  const EntryId e1 = index.insert(base_key(e0, {2}), {{0, BlockId(2)}, {0, BlockId(3)}}).first;
  const EntryId e2 = index.insert(base_key(e1, {3}), {{0, BlockId(4)}, {0, BlockId(5)}}).first;
  const ContentKey res = ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, kAgentA);
  const EntryId r0 = index.insert(residual_key(EntryId(), e0, res, {kAgentA}), {{1, BlockId(0)}}).first;
  const EntryId r1 = index.insert(residual_key(r0, e1, res, {kAgentA}), {{1, BlockId(1)}}).first;
  const EntryId other =
      index.insert(base_key(EntryId(), {9}, StorageDtype::kFloat32, kAgentB), {{0, BlockId(6)}}).first;
  EXPECT_EQ(index.num_entries(), 6);
  EXPECT_EQ(index.erase_block({0, BlockId(3)}), 3);  // e1, its child e2 and the residual r1 on it
  EXPECT_TRUE(index.contains(e0));
  EXPECT_TRUE(index.contains(r0));
  EXPECT_TRUE(index.contains(other));
  EXPECT_FALSE(index.contains(e1));
  EXPECT_FALSE(index.contains(e2));
  EXPECT_FALSE(index.contains(r1));
  EXPECT_FALSE(index.entry_of({0, BlockId(2)}));
  EXPECT_FALSE(index.entry_of({1, BlockId(1)}));
  EXPECT_FALSE(index.find(base_key(e0, {2})));
  EXPECT_EQ(index.erase_block({0, BlockId(3)}), 0);
  EXPECT_EQ(index.erase_block({0, BlockId(0)}), 2);  // e0 and r0
  EXPECT_EQ(index.num_entries(), 1);
  EXPECT_EQ(index.num_indexed_blocks(), 1);
}

}  // namespace
}  // namespace lorakv::cache
