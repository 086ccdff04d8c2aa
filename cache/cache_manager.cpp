// cache/cache_manager.cpp: pools, sequences, appends (with copy-on-write), release, slots.
// Prefix sharing, forks and compaction live in cache_manager_sharing.cpp.
#include "lorakv/cache/cache_manager.h"

#include <algorithm>
#include <limits>
#include <string>

#include "lorakv/common/errors.h"

namespace lorakv::cache {

CacheManager::CacheManager(CacheConfig config) : config_(std::move(config)) {
  config_.layout.check();
  LORAKV_CHECK(config_.residual_dtype != StorageDtype::kInt8, InvalidArgumentError,
               "residual rows are float32 or bfloat16; int8 is for the base pool only");
  allocators_.emplace_back(config_.num_base_blocks);
  for (size_t i = 0; i < config_.residual_pools.size(); ++i) {
    const ResidualPoolSpec& p = config_.residual_pools[i];
    LORAKV_ASSERT(p.rank > 0, "residual pool rank must be positive");
    for (size_t j = 0; j < i; ++j) LORAKV_ASSERT(config_.residual_pools[j].rank != p.rank, "two pools of rank " << p.rank);
    allocators_.emplace_back(p.num_blocks);
  }
  tag_for(AdapterIdentity::base_model());
}

int32_t CacheManager::pool_for_rank(int64_t rank) const {
  for (size_t i = 0; i < config_.residual_pools.size(); ++i) {
    if (config_.residual_pools[i].rank == rank) return static_cast<int32_t>(i + 1);
  }
  return -1;
}

int32_t CacheManager::add_residual_pool(ResidualPoolSpec spec) {
  LORAKV_ASSERT(spec.rank > 0 && spec.num_blocks > 0, "residual pool needs a positive rank and size");
  LORAKV_ASSERT(pool_for_rank(spec.rank) < 0, "a pool of rank " << spec.rank << " exists");
  config_.residual_pools.push_back(spec);
  allocators_.emplace_back(spec.num_blocks);
  return static_cast<int32_t>(allocators_.size() - 1);
}

uint32_t CacheManager::tag_for(AdapterIdentity owner) {
  auto it = owner_tag_.find(owner);
  if (it != owner_tag_.end()) return it->second;
  const auto tag = static_cast<uint32_t>(tag_owner_.size());
  tag_owner_.push_back(owner);
  owner_tag_.emplace(owner, tag);
  return tag;
}

AdapterIdentity CacheManager::owner_of(int32_t pool, BlockId block) const {
  return tag_owner_[allocator(pool).tag(block)];
}

const SequenceState& CacheManager::sequence(SeqId seq) const {
  auto it = seqs_.find(seq);
  LORAKV_ASSERT(it != seqs_.end(), "unknown sequence " << seq.value());
  return it->second;
}

SequenceState& CacheManager::state(SeqId seq) {
  auto it = seqs_.find(seq);
  LORAKV_ASSERT(it != seqs_.end(), "unknown sequence " << seq.value());
  return it->second;
}

std::vector<SeqId> CacheManager::sequences() const {
  std::vector<SeqId> out;
  for (const auto& [id, s] : seqs_) out.push_back(id);
  return out;
}

const ResidualStream* SequenceState::find_residual(const ContentKey& key) const {
  const auto found = std::find_if(residuals.begin(), residuals.end(), [&](const ResidualStream& r) { return r.key == key; });
  return found == residuals.end() ? nullptr : &*found;
}

ResidualStream* SequenceState::find_residual(const ContentKey& key) {
  return const_cast<ResidualStream*>(static_cast<const SequenceState*>(this)->find_residual(key));
}

int64_t CacheManager::residual_index(const SequenceState& s, const ContentKey& key) const {
  const ResidualStream* r = s.find_residual(key);
  return r == nullptr ? -1 : r - s.residuals.data();
}

const ResidualStream& CacheManager::residual(SeqId seq, const ContentKey& stream) const {
  const SequenceState& s = sequence(seq);
  const int64_t r = residual_index(s, stream);
  LORAKV_ASSERT(r >= 0, "sequence " << seq.value() << " has no such residual stream");
  return s.residuals[static_cast<size_t>(r)];
}

// Blocks an append of `add` rows to `table` takes from `pool`: new blocks past the last, and
// one copy when the partly filled last block is shared.
int64_t CacheManager::append_need(int32_t pool, const BlockTable& table, int64_t add) const {
  if (add == 0) return 0;
  const int64_t bs = layout().block_size;
  int64_t need = layout().blocks_for(table.num_rows + add) - static_cast<int64_t>(table.blocks.size());
  if (table.num_rows % bs != 0 && allocator(pool).refcount(table.blocks.back()) > 1) ++need;
  return need;
}

// Rows of `lane` a residual append of num_tokens positions fills: the lane's base rows from
// the residual fill on, up to the first with position >= covered + num_tokens.
std::vector<int64_t> CacheManager::residual_rows_to_add(const SequenceState& s, const ResidualStream& r,
                                                        int64_t lane, int64_t num_tokens) const {
  const BaseLane& base = s.lanes[static_cast<size_t>(lane)];
  const int64_t fill = r.lanes[static_cast<size_t>(lane)].num_rows;
  const int64_t from = s.first_position + r.covered;  // covered counts from the sequence's first position
  const auto end = std::lower_bound(base.positions.begin(), base.positions.end(), from + num_tokens);
  std::vector<int64_t> offsets;
  for (auto it = base.positions.begin() + fill; it != end; ++it) offsets.push_back(*it - from);
  return offsets;
}

Capacity CacheManager::can_append(SeqId seq, const AppendRequest& request) const {
  const SequenceState& s = sequence(seq);
  Capacity cap;
  cap.blocks_needed.assign(static_cast<size_t>(num_pools()), 0);
  for (int32_t p = 0; p < num_pools(); ++p) cap.blocks_free.push_back(allocator(p).num_free());
  const auto t = static_cast<int64_t>(request.tokens.size());
  const int64_t new_length = s.num_positions + t;
  // Positions are kept as int32 (BaseLane::positions, the kernel's views): refuse the row
  // that would not fit rather than wrap.
  if (s.first_position + new_length - 1 > std::numeric_limits<int32_t>::max()) {
    throw ConfigError("a sequence cannot grow past position 2^31 - 1",
                      {"", "sequence " + std::to_string(seq.value()), "positions below 2147483648",
                       "position " + std::to_string(s.first_position + new_length - 1), ""});
  }
  for (const BaseLane& lane : s.lanes) cap.blocks_needed[0] += append_need(0, lane.table, t);
  for (size_t i = 0; i < request.residuals.size(); ++i) {
    const ResidualAppend& ra = request.residuals[i];
    const int64_t ri = residual_index(s, ra.stream);
    LORAKV_ASSERT(ri >= 0, "append to a residual stream the sequence does not have");
    for (size_t j = 0; j < i; ++j) LORAKV_ASSERT(request.residuals[j].stream != ra.stream, "residual stream twice in one append");
    const ResidualStream& r = s.residuals[static_cast<size_t>(ri)];
    LORAKV_ASSERT(ra.num_tokens >= 0 && r.covered + ra.num_tokens <= new_length,
                  "residual rows past the sequence's tokens (" << r.covered << " + " << ra.num_tokens << " > "
                                                               << new_length << ")");
    for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
      const int32_t pool = r.pools[static_cast<size_t>(layout().layer_of(lane))];
      if (pool < 0) continue;
      // Positions added to the base lane by this same request count too.
      int64_t add = static_cast<int64_t>(residual_rows_to_add(s, r, lane, ra.num_tokens).size());
      if (r.covered + ra.num_tokens > s.num_positions) {
        add += r.covered + ra.num_tokens - std::max<int64_t>(r.covered, s.num_positions);
      }
      cap.blocks_needed[static_cast<size_t>(pool)] += append_need(pool, r.lanes[static_cast<size_t>(lane)], add);
    }
  }
  for (int32_t p = 0; p < num_pools(); ++p) cap.ok = cap.ok && cap.blocks_needed[p] <= cap.blocks_free[p];
  return cap;
}

LaneSlots CacheManager::append_rows(int32_t pool, BlockTable& table, int64_t add, uint32_t tag, StorageOps& ops) {
  LaneSlots out;
  if (add == 0) return out;
  out.pool = pool;
  const int64_t bs = layout().block_size;
  BlockAllocator& alloc = allocators_[static_cast<size_t>(pool)];
  // Room first: once blocks are taken, nothing may throw before the table holds them (a
  // block taken and lost would never come back, even on rollback).
  table.blocks.reserve(static_cast<size_t>(layout().blocks_for(table.num_rows + add)));
  ops.copies.reserve(ops.copies.size() + 1);
  out.slots.reserve(static_cast<size_t>(add));
  if (table.num_rows % bs != 0 && alloc.refcount(table.blocks.back()) > 1) {
    const std::optional<std::vector<BlockId>> copy_block = take_blocks(pool, 1, tag);  // counted by can_append
    LORAKV_ASSERT(copy_block.has_value(), "copy-on-write ran out of blocks after can_append said yes");
    const BlockId copy = copy_block->front();
    ops.copies.push_back({pool, table.blocks.back(), copy});
    alloc.release(table.blocks.back());
    table.blocks.back() = copy;
  }
  const int64_t more = layout().blocks_for(table.num_rows + add) - static_cast<int64_t>(table.blocks.size());
  const std::optional<std::vector<BlockId>> fresh = take_blocks(pool, more, tag);
  LORAKV_ASSERT(fresh.has_value(), "append ran out of blocks after can_append said yes");
  table.blocks.insert(table.blocks.end(), fresh->begin(), fresh->end());
  for (int64_t i = 0; i < add; ++i) {
    const int64_t row = table.num_rows + i;
    out.slots.push_back(table.blocks[static_cast<size_t>(row / bs)].value() * bs + row % bs);
  }
  table.num_rows += add;
  return out;
}

std::optional<AppendSlots> CacheManager::append(SeqId seq, const AppendRequest& request) {
  if (!can_append(seq, request).ok) return std::nullopt;
  remember(seq);
  SequenceState& s = state(seq);
  AppendSlots out;
  const auto t = static_cast<int64_t>(request.tokens.size());
  out.first_position = s.first_position + s.num_positions;
  const uint32_t base_tag = tag_for(s.base_key.adapter);
  for (BaseLane& lane : s.lanes) {
    LaneSlots slots = append_rows(0, lane.table, t, base_tag, out.ops);
    for (int64_t i = 0; i < t; ++i) {
      slots.token_offsets.push_back(i);
      lane.positions.push_back(static_cast<int32_t>(out.first_position + i));
    }
    lane.extend_row_state();
    out.base.push_back(std::move(slots));
  }
  if (s.keeps_tokens) s.tokens.insert(s.tokens.end(), request.tokens.begin(), request.tokens.end());
  s.num_positions += t;
  s.writers.append(t, request.writer);
  for (const ResidualAppend& ra : request.residuals) {
    ResidualStream& r = s.residuals[static_cast<size_t>(residual_index(s, ra.stream))];
    const uint32_t tag = tag_for(r.key.adapter);
    std::vector<LaneSlots> lanes;
    for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
      const int32_t pool = r.pools[static_cast<size_t>(layout().layer_of(lane))];
      if (pool < 0) {
        lanes.emplace_back();
        continue;
      }
      std::vector<int64_t> offsets = residual_rows_to_add(s, r, lane, ra.num_tokens);
      LaneSlots slots = append_rows(pool, r.lanes[static_cast<size_t>(lane)],
                                    static_cast<int64_t>(offsets.size()), tag, out.ops);
      slots.token_offsets = std::move(offsets);
      lanes.push_back(std::move(slots));
    }
    r.covered += ra.num_tokens;
    r.writers.append(ra.num_tokens, request.writer);
    out.residual.push_back(std::move(lanes));
  }
  // In a transaction the rows are not written yet: the outermost commit indexes them.
  if (journal_.empty()) register_full_blocks(s);
  return out;
}

void CacheManager::release_block(int32_t pool, BlockId block) {
  // An indexed block stays cached: a later sequence with the same prefix may take it back.
  const bool indexed = index_.entry_of({pool, block}).has_value();
  allocators_[static_cast<size_t>(pool)].release(block, indexed);
}

std::optional<std::vector<BlockId>> CacheManager::take_blocks(int32_t pool, int64_t n, uint32_t tag) {
  std::vector<BlockId> reclaimed;
  std::optional<std::vector<BlockId>> out = allocators_[static_cast<size_t>(pool)].allocate(n, tag, &reclaimed);
  for (BlockId b : reclaimed) unindex({pool, b});  // their rows are about to be overwritten
  return out;
}

void CacheManager::unindex(BlockRef block) {
  index_.erase_block(block, [this](BlockRef b) {
    BlockAllocator& a = allocators_[static_cast<size_t>(b.pool)];
    if (a.is_cached(b.block)) a.uncache(b.block);
  });
}

void CacheManager::release(SeqId seq) {
  LORAKV_ASSERT(journal_.empty(), "release inside a transaction (its blocks could not come back on rollback)");
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  release_blocks(it->second);
  seqs_.erase(it);
}

void CacheManager::detach_residual(SeqId seq, const ContentKey& key) {
  LORAKV_ASSERT(journal_.empty(), "detach_residual inside a transaction");
  SequenceState& s = state(seq);
  const int64_t index = residual_index(s, key);
  LORAKV_ASSERT(index >= 0, "sequence " << seq.value() << " has no such residual stream");
  release_stream_blocks(s.residuals[static_cast<size_t>(index)]);
  s.residuals.erase(s.residuals.begin() + index);
}

static std::vector<int64_t> table_slots(const BlockTable& table, int64_t bs) {
  std::vector<int64_t> slots(static_cast<size_t>(table.num_rows));
  for (int64_t row = 0; row < table.num_rows; ++row) {
    slots[static_cast<size_t>(row)] = table.blocks[static_cast<size_t>(row / bs)].value() * bs + row % bs;
  }
  return slots;
}

std::vector<int64_t> CacheManager::base_slots(SeqId seq, int64_t lane) const {
  return table_slots(sequence(seq).lanes.at(static_cast<size_t>(lane)).table, layout().block_size);
}

std::vector<int64_t> CacheManager::residual_slots(SeqId seq, const ContentKey& stream, int64_t lane) const {
  return table_slots(residual(seq, stream).lanes.at(static_cast<size_t>(lane)), layout().block_size);
}

int64_t CacheManager::host_metadata_bytes() const {
  int64_t bytes = index_.host_bytes();
  for (const BlockAllocator& a : allocators_) bytes += a.num_blocks() * static_cast<int64_t>(sizeof(int32_t) * 3 + sizeof(BlockId));
  for (const auto& [id, s] : seqs_) {
    bytes += static_cast<int64_t>(sizeof(s) + s.tokens.capacity() * sizeof(int32_t) + s.writers.host_bytes() +
                                  s.base_chain.capacity() * sizeof(EntryId));
    for (const BaseLane& lane : s.lanes) {
      bytes += static_cast<int64_t>(sizeof(lane) + lane.table.blocks.capacity() * sizeof(BlockId) +
                                    lane.positions.capacity() * sizeof(int32_t) + lane.live.capacity() +
                                    lane.scores.capacity() * sizeof(float));
    }
    for (const ResidualStream& r : s.residuals) {
      bytes += static_cast<int64_t>(sizeof(r) + r.writers.host_bytes());
      for (const BlockTable& t : r.lanes) bytes += static_cast<int64_t>(sizeof(t) + t.blocks.capacity() * sizeof(BlockId));
    }
  }
  return bytes;
}

}  // namespace lorakv::cache
