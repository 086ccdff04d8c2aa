// cache/prefix_index.h: the tensor-free prefix index that lets a sequence reuse blocks
// another sequence already filled. A radix tree at block granularity: an entry stands for
// one full block of tokens in every lane of one stream, and its key is
//   (parent entry, base entry [residual entries only], content key, the block's token ids,
//    the writer of every row),
// compared exactly (the 64-bit hash only picks the bucket). The content key says what kind
// of rows the block holds (base rows, full rows with an adapter's output, a residual
// stream); the writers say whose hidden states filled them. A lookup names the writers it
// needs, row by row (the engine asks for the writer its sharing mode would use,
// docs/sharing_modes.md "Reuse"): rows are never reused from whichever writer happened to
// fill them first in another context.
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
  ContentKey key;               // the rows' kind: base, full (base_with_adapter) or residual
  std::vector<int32_t> tokens;  // base entries: the block's block_size token ids; residual: empty
  std::vector<AdapterIdentity> writers;  // per row of the block: whose hidden states filled it

  friend bool operator==(const PrefixEntryKey& a, const PrefixEntryKey& b) {
    return a.parent == b.parent && a.base == b.base && a.key == b.key && a.tokens == b.tokens &&
           a.writers == b.writers;
  }
};

struct PrefixEntry {
  PrefixEntryKey key;
  std::vector<BlockRef> blocks;     // per lane (layer-major), the block holding these rows
  std::vector<EntryId> dependents;  // entries whose key names this one as parent or base
};

class PrefixIndex {
 public:
  // The entry with this key, writers included.
  std::optional<EntryId> find(const PrefixEntryKey& key) const;
  // Inserts an entry, unless one with the same key exists: then returns that one and false.
  // None of `blocks` may be indexed already.
  std::pair<EntryId, bool> insert(PrefixEntryKey key, std::vector<BlockRef> blocks);
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
