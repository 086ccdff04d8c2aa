// cache/prefix_index.h: the tensor-free prefix index that lets a sequence reuse blocks
// another sequence already filled. A radix tree at block granularity: an entry stands for
// one full block of tokens in every lane of one stream, and its key is
//   (parent entry, base entry [residual entries only], content key, the block's token ids),
// compared exactly (the 64-bit hash only picks the bucket), plus the writer of every row.
// Chaining on the parent *entry* (not on a hash of tokens) means an entry matches only if
// the whole token prefix matched and every earlier block was the very one this block's
// rows were computed against. Residual entries hang off the base entry of their token
// block, since C = X A depends on the base rows the writer attended over.
//
// The index holds no references: entries point at blocks in use or cached (unreferenced but
// kept, block_allocator.h), and the cache manager erases an entry when one of its blocks is
// reclaimed for other rows or rewritten in place (compaction); its dependents (later blocks,
// residual entries on it) go with it. Reuse by counting tokens
// is never done. Not thread-safe; owned and mutated only by CacheManager.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lorakv/cache/cache_types.h"
#include "lorakv/common/ids.h"

namespace lorakv::cache {

using EntryId = StrongId<struct PrefixEntryTag>;

struct PrefixEntryKey {
  EntryId parent;               // the same stream's previous block; invalid at token 0
  EntryId base;                 // residual entries: the base entry of this token block
  ContentKey key;
  std::vector<int32_t> tokens;  // base entries: the block's block_size token ids; residual: empty

  friend bool operator==(const PrefixEntryKey& a, const PrefixEntryKey& b) {
    return a.parent == b.parent && a.base == b.base && a.key == b.key && a.tokens == b.tokens;
  }
};

struct PrefixEntry {
  PrefixEntryKey key;
  std::vector<AdapterIdentity> writers;  // per row of the block: whose hidden states filled it
  std::vector<BlockRef> blocks;          // per lane (layer-major), the block holding these rows
  std::vector<EntryId> dependents;       // entries whose key names this one as parent or base
};

// Which writers a lookup accepts: any (sharing mode `first`), or exactly one for every row
// (writer `base`, or `full` mode's own rows).
struct WriterFilter {
  std::optional<AdapterIdentity> required;
  bool accepts(const std::vector<AdapterIdentity>& writers) const;
};

class PrefixIndex {
 public:
  // An entry with this key whose writers pass the filter (the oldest, if several).
  std::optional<EntryId> find(const PrefixEntryKey& key, const WriterFilter& filter) const;
  // Inserts an entry, unless one with the same key and writers exists: then returns that
  // one and false. None of `blocks` may be indexed already.
  std::pair<EntryId, bool> insert(PrefixEntryKey key, std::vector<AdapterIdentity> writers,
                                  std::vector<BlockRef> blocks);
  // Removes the entry holding `block`, if any, and everything depending on it; each block of
  // a removed entry is passed to `on_unindexed` (when given). Returns the number of entries
  // removed. Allocates nothing.
  int64_t erase_block(BlockRef block, const std::function<void(BlockRef)>& on_unindexed = nullptr);

  bool contains(EntryId id) const { return entries_.count(id.value()) > 0; }
  const PrefixEntry& entry(EntryId id) const;
  std::optional<EntryId> entry_of(BlockRef block) const;
  int64_t num_entries() const { return static_cast<int64_t>(entries_.size()); }
  int64_t num_indexed_blocks() const { return static_cast<int64_t>(block_to_entry_.size()); }
  // Host memory held by the index (entries, token and writer arrays, maps), approximated
  // from container sizes.
  int64_t host_bytes() const;

 private:
  static uint64_t hash_of(const PrefixEntryKey& key);
  void erase_entry(EntryId id, int64_t& removed, const std::function<void(BlockRef)>& on_unindexed);

  std::unordered_map<int64_t, PrefixEntry> entries_;
  std::unordered_map<uint64_t, std::vector<EntryId>> buckets_;
  std::unordered_map<BlockRef, EntryId, BlockRefHash> block_to_entry_;
  int64_t next_id_ = 0;
};

}  // namespace lorakv::cache
