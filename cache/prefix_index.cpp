// cache/prefix_index.cpp: exact-match block-level radix index.
#include "lorakv/cache/prefix_index.h"

#include <algorithm>

#include "lorakv/common/errors.h"

namespace lorakv::cache {

uint64_t PrefixIndex::hash_of(const PrefixEntryKey& key) {
  uint64_t h = hash_mix(static_cast<uint64_t>(key.parent.value()), static_cast<uint64_t>(key.base.value()));
  h = hash_mix(h, hash_key(key.key));
  for (int32_t t : key.tokens) h = hash_mix(h, static_cast<uint32_t>(t));
  for (const AdapterIdentity& w : key.writers) h = hash_mix(h, std::hash<AdapterIdentity>()(w));
  return h;
}

std::optional<EntryId> PrefixIndex::find(const PrefixEntryKey& key) const {
  auto it = buckets_.find(hash_of(key));
  if (it == buckets_.end()) return std::nullopt;
  for (EntryId id : it->second) {
    if (entries_.at(id.value()).key == key) return id;
  }
  return std::nullopt;
}

std::pair<EntryId, bool> PrefixIndex::insert(PrefixEntryKey key, std::vector<BlockRef> blocks) {
  LORAKV_ASSERT(!key.parent.valid() || contains(key.parent), "parent entry " << key.parent.value() << " is gone");
  LORAKV_ASSERT(!key.base.valid() || contains(key.base), "base entry " << key.base.value() << " is gone");
  const uint64_t h = hash_of(key);
  std::vector<EntryId>& bucket = buckets_[h];
  for (EntryId id : bucket) {
    if (entries_.at(id.value()).key == key) return {id, false};
  }
  for (BlockRef b : blocks) {
    LORAKV_ASSERT(!block_to_entry_.count(b), "block " << b.block.value() << " of pool " << b.pool << " indexed twice");
  }
  const EntryId id(next_id_++);
  PrefixEntry entry{std::move(key), std::move(blocks), {}};
  // All or nothing: an allocation failure half way takes back what was added (a step's
  // commit relies on it, cache_manager.h "Transactions").
  size_t mapped = 0;
  bool parent_linked = false, base_linked = false, bucketed = false;
  try {
    for (BlockRef b : entry.blocks) {
      block_to_entry_.emplace(b, id);
      ++mapped;
    }
    if (entry.key.parent.valid()) {
      entries_.at(entry.key.parent.value()).dependents.push_back(id);
      parent_linked = true;
    }
    if (entry.key.base.valid()) {
      entries_.at(entry.key.base.value()).dependents.push_back(id);
      base_linked = true;
    }
    bucket.push_back(id);
    bucketed = true;
    entries_.emplace(id.value(), std::move(entry));
  } catch (...) {
    for (size_t i = 0; i < mapped; ++i) block_to_entry_.erase(entry.blocks[i]);
    if (parent_linked) entries_.at(entry.key.parent.value()).dependents.pop_back();
    if (base_linked) entries_.at(entry.key.base.value()).dependents.pop_back();
    if (bucketed) bucket.pop_back();
    if (bucket.empty()) buckets_.erase(h);
    throw;
  }
  return {id, true};
}

int64_t PrefixIndex::erase_block(BlockRef block, const std::function<void(BlockRef)>& on_unindexed) {
  auto it = block_to_entry_.find(block);
  if (it == block_to_entry_.end()) return 0;
  int64_t removed = 0;
  erase_entry(it->second, removed, on_unindexed);
  return removed;
}

void PrefixIndex::erase_entry(EntryId id, int64_t& removed, const std::function<void(BlockRef)>& on_unindexed) {
  auto it = entries_.find(id.value());
  if (it == entries_.end()) return;  // already removed through another path
  PrefixEntry e = std::move(it->second);
  entries_.erase(it);
  ++removed;
  for (BlockRef b : e.blocks) block_to_entry_.erase(b);
  if (on_unindexed) {
    for (BlockRef b : e.blocks) on_unindexed(b);
  }
  auto bucket = buckets_.find(hash_of(e.key));
  LORAKV_ASSERT(bucket != buckets_.end(), "entry " << id.value() << " missing from its bucket");
  auto& ids = bucket->second;
  ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
  if (ids.empty()) buckets_.erase(bucket);
  for (EntryId owner : {e.key.parent, e.key.base}) {
    auto o = owner.valid() ? entries_.find(owner.value()) : entries_.end();
    if (o != entries_.end()) {
      auto& deps = o->second.dependents;
      deps.erase(std::remove(deps.begin(), deps.end(), id), deps.end());
    }
  }
  for (EntryId dep : e.dependents) erase_entry(dep, removed, on_unindexed);
}

const PrefixEntry& PrefixIndex::entry(EntryId id) const {
  auto it = entries_.find(id.value());
  LORAKV_ASSERT(it != entries_.end(), "no prefix entry " << id.value());
  return it->second;
}

std::optional<EntryId> PrefixIndex::entry_of(BlockRef block) const {
  auto it = block_to_entry_.find(block);
  if (it == block_to_entry_.end()) return std::nullopt;
  return it->second;
}

int64_t PrefixIndex::host_bytes() const {
  int64_t bytes = 0;
  for (const auto& [id, e] : entries_) {
    bytes += static_cast<int64_t>(sizeof(id) + sizeof(e) + e.key.tokens.capacity() * sizeof(int32_t) +
                                  e.key.writers.capacity() * sizeof(AdapterIdentity) +
                                  e.blocks.capacity() * sizeof(BlockRef) + e.dependents.capacity() * sizeof(EntryId));
  }
  bytes += static_cast<int64_t>(block_to_entry_.size() * (sizeof(BlockRef) + sizeof(EntryId)));
  bytes += static_cast<int64_t>(buckets_.size() * (sizeof(uint64_t) + sizeof(std::vector<EntryId>)));
  return bytes;
}

}  // namespace lorakv::cache
