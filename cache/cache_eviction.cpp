// cache/cache_eviction.cpp: eviction without moving rows (CacheManager::evict): rows leave a
// sequence's view by whole blocks (dropped, their references released) or, inside a block
// that stays, by a mask the kernel reads. Compaction (cache_manager_sharing.cpp) packs what
// the masks leave behind when they hold too much.
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "lorakv/cache/cache_manager.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache {

std::vector<int64_t> CacheManager::live_rows(SeqId seq, int64_t lane) const {
  const BaseLane& l = sequence(seq).lanes.at(static_cast<size_t>(lane));
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(l.num_live()));
  for (int64_t r = 0; r < l.table.num_rows; ++r) {
    if (l.is_live(r)) rows.push_back(r);
  }
  return rows;
}

void CacheManager::add_scores(SeqId seq, int64_t lane, const float* mass, int64_t rows) {
  remember(seq);  // a step that fails gives its scores back with its rows
  BaseLane& l = state(seq).lanes.at(static_cast<size_t>(lane));
  LORAKV_ASSERT(rows >= 0 && rows <= l.table.num_rows, "scores for " << rows << " rows of a lane of " << l.table.num_rows);
  if (l.scores.empty()) l.scores.assign(static_cast<size_t>(l.table.num_rows), 0.f);
  for (int64_t r = 0; r < rows; ++r) l.scores[static_cast<size_t>(r)] += mass[r];
}

void CacheManager::reset_scores(SeqId seq) {
  remember(seq);
  for (BaseLane& l : state(seq).lanes) l.scores.assign(static_cast<size_t>(l.table.num_rows), 0.f);
}

void CacheManager::cut_chains(SequenceState& s, int64_t first_block) {
  size_t longest = s.base_chain.size();
  for (const ResidualStream& r : s.residuals) longest = std::max(longest, r.chain.size());
  // A block another sequence also holds keeps its entry: its rows are all there for that
  // sequence (this one masks rows in its own view, and copies a block before packing it).
  auto unindex_own = [&](int32_t pool, BlockId block) {
    if (allocator(pool).refcount(block) == 1) unindex({pool, block});
  };
  for (auto b = static_cast<size_t>(first_block); b < longest; ++b) {
    for (int64_t lane = 0; lane < layout().num_lanes(); ++lane) {
      const BaseLane& base = s.lanes[static_cast<size_t>(lane)];
      if (b < base.table.blocks.size()) unindex_own(0, base.table.blocks[b]);
      for (const ResidualStream& r : s.residuals) {
        const int32_t pool = r.pools[static_cast<size_t>(layout().layer_of(lane))];
        const BlockTable& t = r.lanes[static_cast<size_t>(lane)];
        if (pool >= 0 && b < t.blocks.size()) unindex_own(pool, t.blocks[b]);
      }
    }
  }
  const auto keep = static_cast<size_t>(first_block);
  if (s.base_chain.size() > keep) s.base_chain.resize(keep);
  for (ResidualStream& r : s.residuals) {
    if (r.chain.size() > keep) r.chain.resize(keep);
  }
  s.indexable = false;
  // Nothing reads the tokens of a sequence that indexes nothing more (suffix sequences, whose
  // tokens a commit adopts, are never cut): an evicted history keeps no token list.
  s.keeps_tokens = false;
  std::vector<int32_t>().swap(s.tokens);
}

void CacheManager::drop_lane_block(SequenceState& s, int64_t lane, int64_t block, EvictionOutcome& out) {
  const int64_t bs = layout().block_size;
  const auto b = static_cast<size_t>(block);
  auto drop = [&](int32_t pool, BlockTable& t) {
    const int64_t rows = std::min(bs, t.num_rows - block * bs);
    if (rows <= 0) return int64_t{0};
    release_block(pool, t.blocks[b]);
    t.blocks.erase(t.blocks.begin() + static_cast<std::ptrdiff_t>(b));
    t.num_rows -= rows;
    ++out.blocks_dropped[static_cast<size_t>(pool)];
    return rows;
  };
  for (ResidualStream& r : s.residuals) {
    const int32_t pool = r.pools[static_cast<size_t>(layout().layer_of(lane))];
    if (pool >= 0) drop(pool, r.lanes[static_cast<size_t>(lane)]);
  }
  BaseLane& base = s.lanes[static_cast<size_t>(lane)];
  const int64_t rows = drop(0, base.table);
  const auto from = static_cast<std::ptrdiff_t>(block * bs), to = from + static_cast<std::ptrdiff_t>(rows);
  base.positions.erase(base.positions.begin() + from, base.positions.begin() + to);
  base.live.erase(base.live.begin() + from, base.live.begin() + to);  // all 0: num_evicted below
  base.num_evicted -= rows;
  if (!base.scores.empty()) base.scores.erase(base.scores.begin() + from, base.scores.begin() + to);
}

namespace {

// Whether some lane of `s` still holds `position` as a live row.
bool held_anywhere(const SequenceState& s, int32_t position) {
  for (const BaseLane& l : s.lanes) {
    const auto it = std::lower_bound(l.positions.begin(), l.positions.end(), position);
    if (it != l.positions.end() && *it == position && l.is_live(it - l.positions.begin())) return true;
  }
  return false;
}

// `positions` (sorted, unique) as [begin, end) ranges of consecutive ones, clipped to `limit`.
std::vector<std::pair<int64_t, int64_t>> ranges_below(const std::vector<int32_t>& positions, int64_t limit) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int32_t p : positions) {
    if (p >= limit) break;
    if (!out.empty() && out.back().second == p) {
      ++out.back().second;
    } else {
      out.emplace_back(p, p + 1);
    }
  }
  return out;
}

}  // namespace

void CacheManager::forget_writers(SequenceState& s, std::vector<int32_t> left) {
  std::sort(left.begin(), left.end());
  left.erase(std::unique(left.begin(), left.end()), left.end());
  left.erase(std::remove_if(left.begin(), left.end(), [&](int32_t p) { return held_anywhere(s, p); }), left.end());
  if (left.empty()) return;
  s.writers.forget(ranges_below(left, s.num_positions));
  for (ResidualStream& r : s.residuals) r.writers.forget(ranges_below(left, r.covered));
}

EvictionOutcome CacheManager::evict(SeqId seq, const KeepSets& keep) {
  LORAKV_ASSERT(journal_.empty(), "eviction inside a transaction (released blocks could not come back on rollback)");
  LORAKV_ASSERT(static_cast<int64_t>(keep.size()) == layout().num_lanes(), "one keep set per lane needed");
  SequenceState& s = state(seq);
  LORAKV_ASSERT(s.first_position == 0, "private rows (suffix sequences) are never evicted");
  const int64_t bs = layout().block_size;
  EvictionOutcome out;
  out.blocks_dropped.assign(static_cast<size_t>(num_pools()), 0);
  // New masks first, checked against the current ones, before any state changes.
  std::vector<std::vector<uint8_t>> masks(s.lanes.size());
  int64_t first_touched = std::numeric_limits<int64_t>::max();
  for (size_t lane = 0; lane < s.lanes.size(); ++lane) {
    const BaseLane& l = s.lanes[lane];
    const std::vector<int64_t>& k = keep[lane];
    std::vector<uint8_t>& mask = masks[lane];
    mask.assign(static_cast<size_t>(l.table.num_rows), 0);
    int64_t prev = -1;
    for (int64_t row : k) {
      LORAKV_ASSERT(row > prev && row < l.table.num_rows && l.is_live(row),
                    "keep set of lane " << lane << " must be ascending live rows; got row " << row);
      mask[static_cast<size_t>(row)] = 1;
      prev = row;
    }
    for (int64_t r = 0; r < l.table.num_rows; ++r) {
      if (l.is_live(r) && !mask[static_cast<size_t>(r)]) {
        first_touched = std::min(first_touched, r / bs);
        break;
      }
    }
  }
  if (first_touched == std::numeric_limits<int64_t>::max()) return out;  // keeps every live row
  cut_chains(s, first_touched);
  std::vector<int32_t> left;  // positions of the rows leaving some lane
  for (size_t lane = 0; lane < s.lanes.size(); ++lane) {
    BaseLane& l = s.lanes[lane];
    for (int64_t r = 0; r < l.table.num_rows; ++r) {
      if (l.is_live(r) && !masks[lane][static_cast<size_t>(r)]) left.push_back(l.positions[static_cast<size_t>(r)]);
    }
    const int64_t live_before = l.num_live();
    l.live = std::move(masks[lane]);
    const int64_t kept = static_cast<int64_t>(keep[lane].size());
    out.rows_evicted += live_before - kept;
    l.num_evicted = l.table.num_rows - kept;
    // Whole blocks with no live row go, from the last so indices below stay valid.
    for (int64_t b = static_cast<int64_t>(l.table.blocks.size()) - 1; b >= 0; --b) {
      const auto from = l.live.begin() + b * bs;
      const auto to = l.live.begin() + std::min((b + 1) * bs, l.table.num_rows);
      if (std::find(from, to, uint8_t{1}) == to) drop_lane_block(s, static_cast<int64_t>(lane), b, out);
    }
    out.rows_masked += l.num_evicted;
    if (l.num_evicted == 0) l.live.clear();
  }
  forget_writers(s, std::move(left));
  return out;
}

}  // namespace lorakv::cache
