// runtime/engine_eviction.cpp: keeping contexts within their token budget. After each step,
// every sequence of rows a policy governs (a context's shared rows, or each reader's own
// rows in `full`) that holds more live rows per lane than the budget is evicted down to it:
// the policy chooses per lane among the live rows (cache/eviction/), the cache drops whole
// blocks and masks the rest (CacheManager::evict), and when masked rows hold too much of
// the sequence's blocks, it packs them (compaction) so their blocks return too.
#include <algorithm>

#include "lorakv/common/logging.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/engine_state.h"

namespace lorakv::runtime {

std::vector<SeqId> ContextState::evictable_seqs() const {
  std::vector<SeqId> seqs;
  if (shared_seq.valid()) seqs.push_back(shared_seq);
  for (const ReaderState& r : readers) {
    if (r.own_seq.valid()) seqs.push_back(r.own_seq);
  }
  return seqs;
}

namespace {

// Masked rows are packed away once they fill this share of a sequence's resident rows:
// below it, the blocks they pin cost less than moving the rows that share them
// (docs/cache_layout.md, "Eviction", has the measurement).
constexpr double kPackWhenMaskedShare = 0.25;

cache::eviction::LaneCandidates candidates(const cache::BaseLane& lane, int64_t layer, bool scores) {
  cache::eviction::LaneCandidates c;
  c.layer = layer;
  for (int64_t r = 0; r < lane.table.num_rows; ++r) {
    if (!lane.is_live(r)) continue;
    c.positions.push_back(lane.positions[static_cast<size_t>(r)]);
    if (scores) c.scores.push_back(lane.scores.empty() ? 0.f : lane.scores[static_cast<size_t>(r)]);
  }
  return c;
}

bool over_budget(const cache::SequenceState& s, int64_t budget) {
  return std::any_of(s.lanes.begin(), s.lanes.end(), [&](const cache::BaseLane& l) { return l.num_live() > budget; });
}

bool worth_packing(const cache::SequenceState& s) {
  int64_t masked = 0, rows = 0;
  for (const cache::BaseLane& l : s.lanes) {
    masked += l.num_evicted;
    rows += l.table.num_rows;
  }
  return masked > 0 && static_cast<double>(masked) >= kPackWhenMaskedShare * static_cast<double>(rows);
}

}  // namespace

std::vector<std::vector<int32_t>> Engine::kept_positions(ContextId context, int32_t reader) const {
  const ContextState& c = state_->context(context);
  const SeqId seq = c.options.mode == SharingMode::kFull ? state_->reader({context, reader}).own_seq : c.shared_seq;
  std::vector<std::vector<int32_t>> lanes(static_cast<size_t>(cache_->layout().num_lanes()));
  if (!seq.valid()) return lanes;
  const cache::SequenceState& s = cache_->manager().sequence(seq);
  for (size_t lane = 0; lane < lanes.size(); ++lane) {
    const cache::BaseLane& l = s.lanes[lane];
    for (int64_t r = 0; r < l.table.num_rows; ++r) {
      if (l.is_live(r)) lanes[lane].push_back(l.positions[static_cast<size_t>(r)]);
    }
  }
  return lanes;
}

void Engine::evict_over_budget(StepStats& stats) {
  const log::Stopwatch watch;
  const cache::CacheLayout& layout = cache_->layout();
  stats.blocks_dropped.assign(static_cast<size_t>(cache_->manager().num_pools()), 0);
  for (auto& [id, c] : state_->contexts) {
    if (!c.policy) continue;
    const int64_t budget = c.options.eviction.budget_rows(static_cast<int64_t>(c.tokens.size()));
    for (SeqId seq : c.evictable_seqs()) {
      const cache::SequenceState& s = cache_->manager().sequence(seq);
      if (!over_budget(s, budget)) continue;
      cache::KeepSets keep(static_cast<size_t>(layout.num_lanes()));
      for (int64_t lane = 0; lane < layout.num_lanes(); ++lane) {
        const cache::BaseLane& l = s.lanes[static_cast<size_t>(lane)];
        const std::vector<int64_t> live = cache_->manager().live_rows(seq, lane);
        const std::vector<int64_t> chosen =
            c.policy->keep(candidates(l, layout.layer_of(lane), c.policy->needs_scores()), budget);
        std::vector<int64_t>& k = keep[static_cast<size_t>(lane)];
        for (int64_t i : chosen) k.push_back(live[static_cast<size_t>(i)]);
      }
      const cache::EvictionOutcome out = cache_->evict(seq, keep);
      stats.rows_evicted += out.rows_evicted;
      for (size_t p = 0; p < out.blocks_dropped.size(); ++p) stats.blocks_dropped[p] += out.blocks_dropped[p];
      if (!worth_packing(s)) continue;
      cache::KeepSets live(static_cast<size_t>(layout.num_lanes()));
      for (int64_t lane = 0; lane < layout.num_lanes(); ++lane) live[static_cast<size_t>(lane)] = cache_->manager().live_rows(seq, lane);
      // Packing copies a shared block it writes into; when the pools are too short for
      // that, the masked rows wait for the next eviction.
      if (cache_->can_compact(seq, live).ok && cache_->compact(seq, live)) stats.rows_packed += out.rows_masked;
    }
  }
  stats.evict_seconds = watch.seconds();
}

}  // namespace lorakv::runtime
