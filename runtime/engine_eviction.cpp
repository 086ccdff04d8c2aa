// runtime/engine_eviction.cpp: keeping contexts within their token budget. After each step,
// every sequence of rows a policy governs (a context's shared rows, or each reader's own
// rows in `full`) that holds more live rows per lane than the budget is evicted down to it:
// the policy chooses per lane among the live rows (cache/eviction/), the cache drops whole
// blocks and masks the rest (CacheManager::evict), and when masked rows hold too much of
// the sequence's blocks, it packs them (compaction) so their blocks return too.
#include <algorithm>

#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/engine_state.h"
#include "lorakv/runtime/eviction_scores.h"

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

using cache::eviction::EvictionPolicy;
using cache::eviction::LaneCandidates;
using cache::eviction::ScoreSource;

// Masked rows are packed away once they fill this share of a sequence's resident rows:
// below it, the blocks they pin cost less than moving the rows that share them
// (docs/cache_layout.md, "Eviction", has the measurement).
constexpr double kPackWhenMaskedShare = 0.25;

LaneCandidates candidates(const cache::BaseLane& lane, int64_t layer, bool scores) {
  LaneCandidates c;
  c.layer = layer;
  for (int64_t r = 0; r < lane.table.num_rows; ++r) {
    if (!lane.is_live(r)) continue;
    c.positions.push_back(lane.positions[static_cast<size_t>(r)]);
    if (scores) c.scores.push_back(lane.scores.empty() ? 0.f : lane.scores[static_cast<size_t>(r)]);
  }
  return c;
}

// Each layer's budget per lane (PyramidKV varies it by layer).
std::vector<int64_t> layer_budgets(const EvictionPolicy& policy, int64_t num_layers, int64_t budget, int64_t tokens) {
  std::vector<int64_t> budgets(static_cast<size_t>(num_layers));
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    budgets[static_cast<size_t>(layer)] = policy.layer_budget(layer, num_layers, budget, tokens);
  }
  return budgets;
}

bool over_budget(const cache::SequenceState& s, const cache::CacheLayout& layout, const EvictionPolicy& policy,
                 const std::vector<int64_t>& budgets) {
  for (int64_t layer = 0; layer < layout.num_layers; ++layer) {
    const int64_t budget = budgets[static_cast<size_t>(layer)];
    int64_t layer_rows = 0;
    for (int64_t g = 0; g < layout.num_groups(); ++g) {
      const int64_t live = s.lanes[static_cast<size_t>(layout.lane(layer, g))].num_live();
      if (live > budget && !policy.budget_shared_by_layer_lanes()) return true;
      layer_rows += live;
    }
    if (layer_rows > budget * layout.num_groups()) return true;
  }
  return false;
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

void check_eviction_fits(const cache::eviction::EvictionConfig& e, const cache::CacheLayout& layout) {
  if (e.policy == "adakv" && layout.num_groups() < 2) {
    throw ConfigError("adakv spreads a layer's budget over its KV heads, so each KV head must keep its own rows",
                      {"", "eviction.policy", "", e.policy,
                       "create the engine with EngineOptions::per_head_token_sets (lorakv perplexity --per-head), or use snapkv"});
  }
  if (e.layer_budgets == "list" && static_cast<int64_t>(e.layer_weights.size()) != layout.num_layers) {
    throw ConfigError("layer_weights needs one weight per layer of the model",
                      {"", "eviction.layer_weights", std::to_string(layout.num_layers) + " weights",
                       std::to_string(e.layer_weights.size()), ""});
  }
}

namespace {

// The candidates of every lane of `layer` with the scores the policy asks for: the mass
// the kernel added to the rows, or leverage computed here from the keys.
std::vector<LaneCandidates> layer_candidates(const cache::PagedKvCache& cache, const Engine::State& st, SeqId seq,
                                             int64_t layer, const EvictionPolicy& policy) {
  const cache::CacheLayout& layout = cache.layout();
  const cache::SequenceState& s = cache.manager().sequence(seq);
  const ScoreSource source = policy.score_source();
  std::vector<LaneCandidates> lanes;
  for (int64_t g = 0; g < layout.num_groups(); ++g) {
    const cache::BaseLane& l = s.lanes[static_cast<size_t>(layout.lane(layer, g))];
    lanes.push_back(candidates(l, layer, source != ScoreSource::kNone && source != ScoreSource::kKeys));
    if (source != ScoreSource::kKeys || lanes.back().positions.empty()) continue;
    const cache::GatheredRows rows = cache.gather_lane(seq, layer, g);  // live rows, in row order
    const at::Tensor keys = unrotated_keys(rows.k, rows.positions, st.rope_cos, st.rope_sin);
    const at::Tensor scores = key_leverage(keys, policy.config().leverage_rank).contiguous();  // float32 [N]
    LORAKV_ASSERT(scores.size(0) == static_cast<int64_t>(lanes.back().positions.size()), "leverage: one score per live row");
    lanes.back().scores.assign(scores.data_ptr<float>(), scores.data_ptr<float>() + scores.size(0));
  }
  return lanes;
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
    const auto tokens = static_cast<int64_t>(c.tokens.size());
    const std::vector<int64_t> budgets =
        layer_budgets(*c.policy, layout.num_layers, c.options.eviction.budget_rows(tokens), tokens);
    for (SeqId seq : c.evictable_seqs()) {
      if (!over_budget(cache_->manager().sequence(seq), layout, *c.policy, budgets)) continue;
      cache::KeepSets keep(static_cast<size_t>(layout.num_lanes()));
      for (int64_t layer = 0; layer < layout.num_layers; ++layer) {
        const std::vector<std::vector<int64_t>> chosen =
            c.policy->keep_layer(layer_candidates(*cache_, *state_, seq, layer, *c.policy), budgets[static_cast<size_t>(layer)]);
        for (int64_t g = 0; g < layout.num_groups(); ++g) {
          const int64_t lane = layout.lane(layer, g);
          const std::vector<int64_t> live = cache_->manager().live_rows(seq, lane);
          std::vector<int64_t>& k = keep[static_cast<size_t>(lane)];
          for (int64_t i : chosen[static_cast<size_t>(g)]) k.push_back(live[static_cast<size_t>(i)]);
        }
      }
      const cache::EvictionOutcome out = cache_->evict(seq, keep);
      stats.rows_evicted += out.rows_evicted;
      for (size_t p = 0; p < out.blocks_dropped.size(); ++p) stats.blocks_dropped[p] += out.blocks_dropped[p];
      const cache::SequenceState& s = cache_->manager().sequence(seq);
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
