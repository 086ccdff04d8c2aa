// cache/cache_transactions.cpp: CacheManager's undo levels (cache_manager.h, "Transactions") and
// the helpers that take or drop every block reference a sequence holds.
#include <algorithm>

#include "lorakv/cache/cache_manager.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache {

void CacheManager::remember(SeqId seq) {
  if (journal_.empty()) return;
  std::map<SeqId, std::optional<SequenceState>>& level = journal_.back();
  if (level.count(seq) > 0) return;
  auto it = seqs_.find(seq);
  level.emplace(seq, it == seqs_.end() ? std::nullopt : std::optional<SequenceState>(it->second));
}

// Every block reference a sequence holds, in base lanes and residual lanes.
void CacheManager::retain_blocks(const SequenceState& s) {
  for (const BaseLane& lane : s.lanes) {
    for (BlockId b : lane.table.blocks) allocators_[0].retain(b);
  }
  for (const ResidualStream& r : s.residuals) {
    for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
      const int32_t pool = r.pools[static_cast<size_t>(layout().layer_of(lane))];
      for (BlockId b : r.lanes[static_cast<size_t>(lane)].blocks) allocators_[static_cast<size_t>(pool)].retain(b);
    }
  }
}

// Tables are released from their end, block index by block index across lanes, residual
// rows before base rows: cached blocks leave the LRU oldest first, so a chain loses its tail
// (one entry at a time, every lane of it) before its prefix (cache_manager.h). Allocates
// nothing: a rollback releases through here.
void CacheManager::release_stream_blocks(const ResidualStream& r) {
  size_t longest = 0;
  for (const BlockTable& t : r.lanes) longest = std::max(longest, t.blocks.size());
  for (size_t i = longest; i-- > 0;) {
    for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
      const BlockTable& t = r.lanes[static_cast<size_t>(lane)];
      if (i < t.blocks.size()) release_block(r.pools[static_cast<size_t>(layout().layer_of(lane))], t.blocks[i]);
    }
  }
}

void CacheManager::release_blocks(const SequenceState& s) {
  for (const ResidualStream& r : s.residuals) release_stream_blocks(r);
  size_t longest = 0;
  for (const BaseLane& lane : s.lanes) longest = std::max(longest, lane.table.blocks.size());
  for (size_t i = longest; i-- > 0;) {
    for (const BaseLane& lane : s.lanes) {
      if (i < lane.table.blocks.size()) release_block(0, lane.table.blocks[i]);
    }
  }
}

void CacheManager::begin_transaction() { journal_.emplace_back(); }

void CacheManager::commit_transaction() {
  LORAKV_ASSERT(!journal_.empty(), "commit without a transaction");
  std::map<SeqId, std::optional<SequenceState>>& level = journal_.back();
  if (journal_.size() > 1) {
    // Into the outer level, which keeps its own (older) saved states. Moving map nodes
    // allocates nothing, so this cannot fail half way.
    std::map<SeqId, std::optional<SequenceState>>& outer = journal_[journal_.size() - 2];
    while (!level.empty()) {
      auto node = level.extract(level.begin());
      if (outer.count(node.key()) == 0) outer.insert(std::move(node));
    }
    journal_.pop_back();
    return;
  }
  // The outermost level: index the blocks whose rows are now written. All or nothing: when
  // indexing fails (memory), what it indexed goes again, the chains are as before, the level
  // stays open for the rollback, and the error propagates.
  size_t bound = 0;
  std::vector<std::pair<SequenceState*, std::vector<std::vector<EntryId>>>> chains;
  for (const auto& [seq, saved] : level) {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) continue;
    SequenceState& s = it->second;
    bound += (static_cast<size_t>(s.num_positions / layout().block_size) + 1) * (s.residuals.size() + 1);
    std::vector<std::vector<EntryId>> saved_chains{s.base_chain};
    for (const ResidualStream& r : s.residuals) saved_chains.push_back(r.chain);
    chains.emplace_back(&s, std::move(saved_chains));
  }
  std::vector<EntryId> inserted;
  inserted.reserve(bound);
  try {
    for (auto& [s, saved] : chains) register_full_blocks(*s, &inserted);
  } catch (...) {
    for (auto id = inserted.rbegin(); id != inserted.rend(); ++id) {
      if (index_.contains(*id)) unindex(index_.entry(*id).blocks.front());
    }
    for (auto& [s, saved] : chains) {
      s->base_chain = std::move(saved.front());
      for (size_t r = 0; r < s->residuals.size(); ++r) s->residuals[r].chain = std::move(saved[r + 1]);
    }
    throw;
  }
  journal_.pop_back();
}

void CacheManager::rollback_transaction() {
  LORAKV_ASSERT(!journal_.empty(), "rollback without a transaction");
  std::map<SeqId, std::optional<SequenceState>> level = std::move(journal_.back());
  journal_.pop_back();
  // Retain what the saved states hold before releasing what the current ones hold, so a
  // block both hold never passes through zero (and the free list) on the way.
  for (const auto& [seq, saved] : level) {
    if (saved) retain_blocks(*saved);
  }
  for (const auto& [seq, saved] : level) {
    auto it = seqs_.find(seq);
    if (it != seqs_.end()) release_blocks(it->second);
  }
  for (auto& [seq, saved] : level) {
    if (saved) {
      seqs_[seq] = std::move(*saved);
    } else {
      seqs_.erase(seq);
    }
  }
}

}  // namespace lorakv::cache
