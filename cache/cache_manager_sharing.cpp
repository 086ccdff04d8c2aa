// cache/cache_manager_sharing.cpp: the parts of CacheManager that share or rewrite blocks:
// prefix matching and registration, sequence creation from a match, forks, residual
// stream attachment, and compaction with copy-on-write.
#include <algorithm>
#include <utility>

#include "lorakv/cache/cache_manager.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache {

PrefixMatch CacheManager::match_prefix(const ContentKey& base_key, const std::vector<int32_t>& tokens,
                                       const WriterRuns& writers) const {
  PrefixMatch match;
  const int64_t bs = layout().block_size;
  const int64_t limit = std::min(static_cast<int64_t>(tokens.size()), writers.size());
  PrefixEntryKey key;
  key.key = base_key;
  for (int64_t i = 0; (i + 1) * bs <= limit; ++i) {
    key.tokens.assign(tokens.begin() + i * bs, tokens.begin() + (i + 1) * bs);
    key.writers = writers.slice(i * bs, (i + 1) * bs);
    std::optional<EntryId> e = index_.find(key);
    if (!e) break;
    match.entries.push_back(*e);
    match.num_tokens += bs;
    key.parent = *e;
  }
  return match;
}

void CacheManager::create_sequence(SeqId seq, const ContentKey& base_key, const PrefixMatch& match) {
  LORAKV_ASSERT(seq.valid() && !has_sequence(seq), "sequence " << seq.value() << " exists or is invalid");
  LORAKV_ASSERT(base_key.kind == StreamKind::kBase && base_key.dtype == config_.base_dtype, "bad base content key");
  remember(seq);
  SequenceState s;
  s.base_key = base_key;
  s.lanes.resize(static_cast<size_t>(layout().num_lanes()));
  for (EntryId id : match.entries) {
    const PrefixEntry& e = index_.entry(id);
    LORAKV_ASSERT(e.key.key == base_key, "prefix match for another content key");
    for (size_t lane = 0; lane < s.lanes.size(); ++lane) s.lanes[lane].table.blocks.push_back(e.blocks[lane].block);
    s.tokens.insert(s.tokens.end(), e.key.tokens.begin(), e.key.tokens.end());
    s.num_positions += static_cast<int64_t>(e.key.tokens.size());
    s.writers.append(WriterRuns::from(e.key.writers));
    s.base_chain.push_back(id);
  }
  for (BaseLane& lane : s.lanes) {
    lane.table.num_rows = s.num_positions;
    for (int64_t p = 0; p < s.num_positions; ++p) lane.positions.push_back(static_cast<int32_t>(p));
  }
  // The references last: retaining cannot fail, so no block is ever retained for a
  // sequence that then fails to exist.
  const SequenceState& stored = seqs_.emplace(seq, std::move(s)).first->second;
  retain_blocks(stored);
}

void CacheManager::create_suffix_sequence(SeqId seq, const ContentKey& base_key, int64_t first_position) {
  LORAKV_ASSERT(first_position >= 0 && first_position < (int64_t{1} << 31), "suffix position out of range");
  create_sequence(seq, base_key);
  SequenceState& s = state(seq);
  s.first_position = first_position;
  s.indexable = false;
}

void CacheManager::fork(SeqId src, SeqId dst) {
  LORAKV_ASSERT(dst.valid() && !has_sequence(dst), "sequence " << dst.value() << " exists or is invalid");
  remember(dst);
  SequenceState copy = sequence(src);
  retain_blocks(seqs_.emplace(dst, std::move(copy)).first->second);  // emplaced first: retaining cannot fail
}

int64_t CacheManager::attach_residual(SeqId seq, const ContentKey& key, std::vector<int64_t> ranks,
                                      const WriterRuns& writers) {
  SequenceState& s = state(seq);
  LORAKV_ASSERT(key.kind != StreamKind::kBase && key.dtype == config_.residual_dtype, "bad residual content key");
  LORAKV_ASSERT(residual_index(s, key) < 0, "residual stream attached twice");
  LORAKV_ASSERT(static_cast<int64_t>(ranks.size()) == layout().num_layers, "one rank per layer needed");
  remember(seq);
  ResidualStream r;
  r.key = key;
  for (int64_t rank : ranks) {
    const int32_t pool = rank == 0 ? -1 : pool_for_rank(rank);
    LORAKV_ASSERT(rank == 0 || pool > 0, "no residual pool of rank " << rank);
    r.pools.push_back(pool);
  }
  r.ranks = std::move(ranks);
  r.lanes.resize(static_cast<size_t>(layout().num_lanes()));
  const int64_t bs = layout().block_size;
  PrefixEntryKey probe;
  probe.key = key;
  for (EntryId base : s.base_chain) {
    if (!index_.contains(base) || r.covered + bs > writers.size()) break;
    probe.base = base;
    probe.writers = writers.slice(r.covered, r.covered + bs);
    std::optional<EntryId> e = index_.find(probe);
    if (!e) break;
    const PrefixEntry& entry = index_.entry(*e);
    size_t k = 0;
    for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
      const int32_t pool = r.pools[static_cast<size_t>(layout().layer_of(lane))];
      if (pool < 0) continue;
      const BlockRef b = entry.blocks.at(k++);
      LORAKV_ASSERT(b.pool == pool, "indexed residual block in another pool");
      BlockTable& t = r.lanes[static_cast<size_t>(lane)];
      t.blocks.push_back(b.block);
      t.num_rows += bs;
    }
    r.covered += bs;
    r.writers.append(WriterRuns::from(entry.key.writers));
    r.chain.push_back(*e);
    probe.parent = *e;
  }
  const int64_t covered = r.covered;
  s.residuals.push_back(std::move(r));
  // The references last, once the stream is in place (retaining cannot fail).
  const ResidualStream& stored = s.residuals.back();
  for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
    const int32_t pool = stored.pools[static_cast<size_t>(layout().layer_of(lane))];
    for (BlockId b : stored.lanes[static_cast<size_t>(lane)].blocks) allocators_[static_cast<size_t>(pool)].retain(b);
  }
  return covered;
}

// Registers the sequence's newly full base and residual blocks (never after a compaction).
void CacheManager::register_full_blocks(SequenceState& s, std::vector<EntryId>* inserted) {
  if (!s.indexable) return;
  // Chains take their new ids without allocating after an insert: an entry is never in the
  // index without its chain knowing it.
  auto add = [&](std::vector<EntryId>& chain, PrefixEntryKey key, std::vector<BlockRef> blocks) {
    chain.reserve(chain.size() + 1);
    const std::pair<EntryId, bool> e = index_.insert(std::move(key), std::move(blocks));
    chain.push_back(e.first);
    if (e.second && inserted) inserted->push_back(e.first);
  };
  const int64_t bs = layout().block_size;
  auto prune = [&](std::vector<EntryId>& chain) {
    auto dead = std::find_if(chain.begin(), chain.end(), [&](EntryId id) { return !index_.contains(id); });
    chain.erase(dead, chain.end());
  };
  prune(s.base_chain);
  const int64_t full = s.num_positions / bs;
  for (auto i = static_cast<int64_t>(s.base_chain.size()); i < full; ++i) {
    PrefixEntryKey key;
    key.parent = i > 0 ? s.base_chain.back() : EntryId();
    key.key = s.base_key;
    key.tokens.assign(s.tokens.begin() + i * bs, s.tokens.begin() + (i + 1) * bs);
    key.writers = s.writers.slice(i * bs, (i + 1) * bs);
    std::vector<BlockRef> blocks;
    for (const BaseLane& lane : s.lanes) blocks.push_back({0, lane.table.blocks[static_cast<size_t>(i)]});
    add(s.base_chain, std::move(key), std::move(blocks));
  }
  for (ResidualStream& r : s.residuals) {
    prune(r.chain);
    const int64_t limit = std::min(static_cast<int64_t>(s.base_chain.size()), r.covered / bs);
    for (auto i = static_cast<int64_t>(r.chain.size()); i < limit; ++i) {
      PrefixEntryKey key;
      key.parent = i > 0 ? r.chain.back() : EntryId();
      key.base = s.base_chain[static_cast<size_t>(i)];
      key.key = r.key;
      key.writers = r.writers.slice(i * bs, (i + 1) * bs);
      std::vector<BlockRef> blocks;
      for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
        const int32_t pool = r.pools[static_cast<size_t>(layout().layer_of(lane))];
        if (pool >= 0) blocks.push_back({pool, r.lanes[static_cast<size_t>(lane)].blocks[static_cast<size_t>(i)]});
      }
      add(r.chain, std::move(key), std::move(blocks));
    }
  }
}

Capacity CacheManager::can_adopt_suffix(SeqId seq, SeqId suffix) const {
  const SequenceState& s = sequence(seq);
  const SequenceState& x = sequence(suffix);
  LORAKV_ASSERT(x.first_position == s.first_position + s.num_positions,
                "suffix " << suffix.value() << " does not start after sequence " << seq.value());
  AppendRequest as_append;
  as_append.tokens.assign(static_cast<size_t>(x.num_positions), 0);  // can_append counts them
  for (const ResidualStream& xr : x.residuals) {
    const ResidualStream* r = s.find_residual(xr.key);
    LORAKV_ASSERT(r != nullptr && r->ranks == xr.ranks, "adopting a residual stream the sequence does not have");
    LORAKV_ASSERT(r->covered == s.num_positions && xr.covered == x.num_positions,
                  "adopting residual rows beside a stream that does not cover every position");
    as_append.residuals.push_back({xr.key, x.num_positions});
  }
  return can_append(seq, as_append);
}

// The rows of `from` (a suffix's table) appended to `to`, as moves within `pool`.
void CacheManager::adopt_rows(int32_t pool, const BlockTable& from, BlockTable& to, uint32_t tag, StorageOps& ops) {
  const int64_t n = from.num_rows, bs = layout().block_size;
  const LaneSlots dst = append_rows(pool, to, n, tag, ops);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t slot = from.blocks[static_cast<size_t>(j / bs)].value() * bs + j % bs;
    ops.moves.push_back({pool, slot, dst.slots[static_cast<size_t>(j)]});
  }
}

std::optional<StorageOps> CacheManager::adopt_suffix(SeqId seq, SeqId suffix) {
  if (!can_adopt_suffix(seq, suffix).ok) return std::nullopt;
  remember(seq);
  SequenceState& s = state(seq);
  const SequenceState& x = sequence(suffix);
  const int64_t n = x.num_positions;
  StorageOps ops;
  const uint32_t tag = tag_for(s.base_key.adapter);
  for (size_t lane = 0; lane < s.lanes.size(); ++lane) {
    adopt_rows(0, x.lanes[lane].table, s.lanes[lane].table, tag, ops);
    const std::vector<int32_t>& positions = x.lanes[lane].positions;
    s.lanes[lane].positions.insert(s.lanes[lane].positions.end(), positions.begin(), positions.end());
    s.lanes[lane].extend_row_state();
  }
  for (const ResidualStream& xr : x.residuals) {
    ResidualStream& r = *s.find_residual(xr.key);  // checked by can_adopt_suffix
    for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
      const int32_t pool = r.pools[static_cast<size_t>(layout().layer_of(lane))];
      if (pool >= 0) adopt_rows(pool, xr.lanes[static_cast<size_t>(lane)], r.lanes[static_cast<size_t>(lane)], tag_for(r.key.adapter), ops);
    }
    r.covered += xr.covered;
    r.writers.append(xr.writers);
  }
  if (s.keeps_tokens) s.tokens.insert(s.tokens.end(), x.tokens.begin(), x.tokens.end());
  s.num_positions += n;
  s.writers.append(x.writers);
  if (journal_.empty()) register_full_blocks(s);  // else the outermost commit does
  return ops;  // the caller applies the moves, then releases the suffix
}

Capacity CacheManager::can_compact(SeqId seq, const KeepSets& keep) const {
  const SequenceState& s = sequence(seq);
  LORAKV_ASSERT(static_cast<int64_t>(keep.size()) == layout().num_lanes(), "one keep set per lane needed");
  Capacity cap;
  cap.blocks_needed.assign(static_cast<size_t>(num_pools()), 0);
  for (int32_t p = 0; p < num_pools(); ++p) cap.blocks_free.push_back(allocator(p).num_free());
  auto count_copies = [&](int32_t pool, const BlockTable& table, const std::vector<int64_t>& k) {
    const CompactionPlan plan = plan_compaction(table.num_rows, k, layout().block_size);
    for (int64_t b : plan.rewritten_blocks) {
      if (allocator(pool).refcount(table.blocks[static_cast<size_t>(b)]) > 1) ++cap.blocks_needed[static_cast<size_t>(pool)];
    }
  };
  for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
    const std::vector<int64_t>& k = keep[static_cast<size_t>(lane)];
    count_copies(0, s.lanes[static_cast<size_t>(lane)].table, k);
    for (const ResidualStream& r : s.residuals) {
      const int32_t pool = r.pools[static_cast<size_t>(layout().layer_of(lane))];
      if (pool < 0) continue;
      const BlockTable& t = r.lanes[static_cast<size_t>(lane)];
      count_copies(pool, t, keep_below(k, t.num_rows));
    }
  }
  for (int32_t p = 0; p < num_pools(); ++p) cap.ok = cap.ok && cap.blocks_needed[p] <= cap.blocks_free[p];
  return cap;
}

// One table's plan: shared blocks that receive rows get a fresh copy (taken now, the shared
// one released at the commit), own blocks whose content changes leave the index at the
// commit, the moves are emitted, and the blocks past the new end are released at the
// commit (after every lane moved, so no block is reused while its rows are a move's source).
BlockTable CacheManager::plan_table(int32_t pool, const BlockTable& table, const std::vector<int64_t>& keep, uint32_t tag,
                                    PlannedCompaction& plan) {
  const int64_t bs = layout().block_size;
  const CompactionPlan layout_plan = plan_compaction(table.num_rows, keep, bs);
  BlockAllocator& alloc = allocators_[static_cast<size_t>(pool)];
  BlockTable after = table;
  for (int64_t b : layout_plan.rewritten_blocks) {
    BlockId& block = after.blocks[static_cast<size_t>(b)];
    if (alloc.refcount(block) > 1) {
      plan.taken_.reserve(plan.taken_.size() + 1);
      plan.replaced_.reserve(plan.replaced_.size() + 1);
      const std::optional<std::vector<BlockId>> copy_block = take_blocks(pool, 1, tag);  // counted by can_compact
      LORAKV_ASSERT(copy_block.has_value(), "copy-on-write ran out of blocks after can_compact said yes");
      const BlockId copy = copy_block->front();
      plan.taken_.push_back({pool, copy});  // reserved: cannot throw once the block is taken
      plan.replaced_.push_back({pool, block});
      plan.ops_.copies.push_back({pool, block, copy});
      block = copy;
    } else {
      plan.unindexed_.push_back({pool, block});
    }
  }
  if (layout_plan.truncated_block >= 0) {
    const BlockId block = table.blocks[static_cast<size_t>(layout_plan.truncated_block)];
    if (alloc.refcount(block) == 1) plan.unindexed_.push_back({pool, block});
  }
  for (const RowMove& m : layout_plan.moves) {
    const int64_t src = table.blocks[static_cast<size_t>(m.src_row / bs)].value() * bs + m.src_row % bs;
    const int64_t dst = after.blocks[static_cast<size_t>(m.dst_row / bs)].value() * bs + m.dst_row % bs;
    plan.ops_.moves.push_back({pool, src, dst});
  }
  for (auto b = static_cast<size_t>(layout_plan.num_blocks_after); b < after.blocks.size(); ++b) {
    plan.released_.push_back({pool, after.blocks[b]});
  }
  after.blocks.resize(static_cast<size_t>(layout_plan.num_blocks_after));
  after.num_rows = layout_plan.num_rows_after;
  return after;
}

std::optional<PlannedCompaction> CacheManager::plan_compact(SeqId seq, const KeepSets& keep) {
  if (!can_compact(seq, keep).ok) return std::nullopt;
  LORAKV_ASSERT(journal_.empty(), "compaction inside a transaction (released blocks could not come back on rollback)");
  const SequenceState& s = sequence(seq);
  PlannedCompaction plan(*this, seq);
  // The chains end before the first block that changes: blocks before it keep every row
  // and stay indexed (a reader joining later adopts their residual rows).
  for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
    const std::vector<int64_t>& k = keep[static_cast<size_t>(lane)];
    int64_t j = 0;
    while (j < static_cast<int64_t>(k.size()) && k[static_cast<size_t>(j)] == j) ++j;
    if (j == s.lanes[static_cast<size_t>(lane)].table.num_rows) continue;  // keeps everything
    const int64_t block = j / layout().block_size;
    plan.first_changed_ = plan.first_changed_ < 0 ? block : std::min(plan.first_changed_, block);
  }
  const uint32_t base_tag = tag_for(s.base_key.adapter);
  for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
    const std::vector<int64_t>& k = keep[static_cast<size_t>(lane)];
    const BaseLane& base = s.lanes[static_cast<size_t>(lane)];
    if (static_cast<int64_t>(k.size()) == base.table.num_rows) continue;  // keeps everything
    PlannedCompaction::Lane after;
    after.lane = lane;
    for (size_t i = 0; i < s.residuals.size(); ++i) {
      const ResidualStream& r = s.residuals[i];
      const int32_t pool = r.pools[static_cast<size_t>(layout().layer_of(lane))];
      if (pool < 0) continue;
      const BlockTable& t = r.lanes[static_cast<size_t>(lane)];
      after.residual.emplace_back(i, plan_table(pool, t, keep_below(k, t.num_rows), tag_for(r.key.adapter), plan));
    }
    after.base = plan_table(0, base.table, k, base_tag, plan);
    after.positions.reserve(k.size());
    for (int64_t row : k) {
      after.positions.push_back(base.positions[static_cast<size_t>(row)]);
      if (!base.live.empty()) after.live.push_back(base.live[static_cast<size_t>(row)]);
      if (!base.scores.empty()) after.scores.push_back(base.scores[static_cast<size_t>(row)]);
    }
    after.num_evicted = static_cast<int64_t>(std::count(after.live.begin(), after.live.end(), uint8_t{0}));
    if (after.num_evicted == 0) after.live.clear();
    plan.lanes_.push_back(std::move(after));
  }
  LORAKV_ASSERT(plan.lanes_.empty() == (plan.first_changed_ < 0), "compaction: changed lanes disagree");
  return plan;
}

void CacheManager::commit_compact(PlannedCompaction& plan) noexcept {
  SequenceState& s = seqs_.at(plan.seq_);
  for (BlockRef b : plan.unindexed_) unindex(b);
  if (plan.first_changed_ >= 0) cut_chains(s, plan.first_changed_);
  for (PlannedCompaction::Lane& after : plan.lanes_) {
    BaseLane& base = s.lanes[static_cast<size_t>(after.lane)];
    for (auto& [stream, table] : after.residual) s.residuals[stream].lanes[static_cast<size_t>(after.lane)] = std::move(table);
    base.table = std::move(after.base);
    base.positions = std::move(after.positions);
    base.live = std::move(after.live);
    base.scores = std::move(after.scores);
    base.num_evicted = after.num_evicted;
  }
  for (BlockRef b : plan.replaced_) allocators_[static_cast<size_t>(b.pool)].release(b.block);
  for (BlockRef b : plan.released_) release_block(b.pool, b.block);
  plan.manager_ = nullptr;  // the copies belong to the sequence now
}

std::optional<StorageOps> CacheManager::compact(SeqId seq, const KeepSets& keep) {
  std::optional<PlannedCompaction> plan = plan_compact(seq, keep);
  if (!plan) return std::nullopt;
  StorageOps ops = plan->ops();
  commit_compact(*plan);
  return ops;
}

PlannedCompaction::PlannedCompaction(PlannedCompaction&& other) noexcept
    : manager_(std::exchange(other.manager_, nullptr)),
      seq_(other.seq_),
      first_changed_(other.first_changed_),
      ops_(std::move(other.ops_)),
      lanes_(std::move(other.lanes_)),
      taken_(std::move(other.taken_)),
      replaced_(std::move(other.replaced_)),
      unindexed_(std::move(other.unindexed_)),
      released_(std::move(other.released_)) {}

PlannedCompaction::~PlannedCompaction() {
  if (!manager_) return;
  for (BlockRef b : taken_) manager_->allocators_[static_cast<size_t>(b.pool)].release(b.block);
}

}  // namespace lorakv::cache
