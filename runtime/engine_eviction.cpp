// runtime/engine_eviction.cpp: keeping contexts within their token budget. In the phase after
// each step (Engine::evict, which the driver calls), every sequence of rows a policy governs
// (a context's shared rows, or each reader's own rows in `full`) that holds more live rows
// per lane than the budget is evicted down to it:
// the policy chooses per lane among the live rows (cache/eviction/), the cache drops whole
// blocks and masks the rest (CacheManager::evict), and when masked rows hold too much of
// the sequence's blocks, it packs them (compaction) so their blocks return too.
#include <algorithm>

#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/engine_state.h"
#include "lorakv/runtime/sharing_rules.h"
#include "lorakv/runtime/eviction_bound.h"
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

bool ContextState::needs_query_anchor() const {
  return policy && policy->score_source() == cache::eviction::ScoreSource::kKeysValuesQueries;
}

QueryAnchor* ContextState::query_anchor(SeqId seq) {
  if (!seq.valid()) return nullptr;
  if (seq == shared_seq) return &shared_anchor;
  for (ReaderState& r : readers) {
    if (r.own_seq == seq) return &r.own_anchor;
  }
  return nullptr;
}

const QueryAnchor* ContextState::query_anchor(SeqId seq) const { return const_cast<ContextState*>(this)->query_anchor(seq); }

void QueryAnchor::add(const at::Tensor& more, int64_t n) {
  if (n == 0) return;
  sum = sum.defined() ? sum + more : more.clone();  // out of place: a fork's copy shares the old tensor
  count += n;
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
                       "give each KV head its own token set (EngineOptions::per_head_token_sets; YAML "
                       "cache.per_head_token_sets: true; the --per-head flag of generate and perplexity), or use snapkv"});
  }
  if (e.layer_budgets == "list" && static_cast<int64_t>(e.layer_weights.size()) != layout.num_layers) {
    throw ConfigError("layer_weights needs one weight per layer of the model",
                      {"", "eviction.layer_weights", std::to_string(layout.num_layers) + " weights",
                       std::to_string(e.layer_weights.size()), ""});
  }
}

namespace {

// capkv's scores of one lane's live rows: the rows after the sinks scored against `anchor`
// (float32 [the lane's query heads, head_dim], rotated), summed over the lane's KV heads;
// the sinks score the maximum + 1, as kvpress pads them (they are protected anyway).
std::vector<float> capacity_lane_scores(const cache::GatheredRows& rows, const at::Tensor& anchor,
                                        const cache::eviction::EvictionConfig& e) {
  const int64_t n = rows.positions.size(0);
  const int64_t sinks = rows.positions.lt(e.sinks).sum().item<int64_t>();  // positions ascend: a prefix
  std::vector<float> out(static_cast<size_t>(n), 0.f);
  if (sinks == n) return out;
  const at::Tensor scores = capkv_scores(rows.k.narrow(1, sinks, n - sinks), rows.v.narrow(1, sinks, n - sinks), anchor,
                                         e.capkv_tau)
                                .sum(0)
                                .contiguous();  // float32 [n - sinks]
  const float* p = scores.data_ptr<float>();
  std::copy(p, p + (n - sinks), out.begin() + sinks);
  const float top = *std::max_element(out.begin() + sinks, out.end());
  std::fill(out.begin(), out.begin() + sinks, top + 1);
  return out;
}

// The candidates of every lane of `layer` with the scores the policy asks for: the mass
// the kernel added to the rows, or scores computed here from the rows (leverage, capkv;
// `anchor`: capkv's float32 [layers, heads, head_dim], rotated, else undefined), and the rows
// the protected window gains during a reply (`window_extra`).
std::vector<LaneCandidates> layer_candidates(const cache::PagedKvCache& cache, const Engine::State& st, SeqId seq,
                                             int64_t layer, const EvictionPolicy& policy, const at::Tensor& anchor,
                                             int64_t window_extra) {
  const cache::CacheLayout& layout = cache.layout();
  const cache::SequenceState& s = cache.manager().sequence(seq);
  const ScoreSource source = policy.score_source();
  const bool from_rows = source == ScoreSource::kKeys || source == ScoreSource::kKeysValuesQueries;
  std::vector<LaneCandidates> lanes;
  for (int64_t g = 0; g < layout.num_groups(); ++g) {
    const cache::BaseLane& l = s.lanes[static_cast<size_t>(layout.lane(layer, g))];
    lanes.push_back(candidates(l, layer, source != ScoreSource::kNone && !from_rows));
    lanes.back().window_extra = window_extra;
    if (!from_rows || lanes.back().positions.empty()) continue;
    const cache::GatheredRows rows = cache.gather_lane(seq, layer, g);  // live rows, in row order
    std::vector<float>& out = lanes.back().scores;
    if (source == ScoreSource::kKeys) {
      const at::Tensor keys = unrotated_keys(rows.k, rows.positions, st.rope_cos, st.rope_sin);
      const at::Tensor scores = key_leverage(keys, policy.config().leverage_rank).contiguous();  // float32 [N]
      out.assign(scores.data_ptr<float>(), scores.data_ptr<float>() + scores.size(0));
    } else {
      // The lane's query heads: its KV heads' groups of query heads (repeat_kv's order).
      const int64_t per_kv = anchor.size(1) / layout.num_kv_heads;
      const at::Tensor heads = anchor[layer].narrow(0, g * layout.heads_per_group * per_kv, layout.heads_per_group * per_kv);
      out = capacity_lane_scores(rows, heads, policy.config());
    }
    LORAKV_ASSERT(out.size() == lanes.back().positions.size(), "" << policy.config().policy << ": one score per live row");
  }
  return lanes;
}

// capkv's anchor of `seq` for an eviction now: its writer's mean query before RoPE, rotated by
// the RoPE averaged over the `capkv_future_positions` positions after the context's `tokens`.
// Returns float32 [layers, heads, head_dim]; zeros before any query (every weight then 1).
at::Tensor rotated_anchor(const ContextState& c, SeqId seq, const Engine::State& st, const ModelConfig& m,
                          int64_t tokens) {
  const QueryAnchor* a = c.query_anchor(seq);
  if (!a || a->count == 0) return at::zeros({m.num_layers, m.num_heads, m.head_dim}, at::kFloat);
  const at::Tensor mean = (a->sum / static_cast<double>(a->count)).view({m.num_layers * m.num_heads, m.head_dim});
  return capkv_anchor(mean, tokens, c.options.eviction.capkv_future_positions, st.rope_cos, st.rope_sin)
      .view({m.num_layers, m.num_heads, m.head_dim});
}

}  // namespace

namespace {

// The rows eviction governs that `reader` reads: the shared rows, or in `full` its own.
SeqId evictable_seq_of(const Engine::State& st, ContextId context, int32_t reader) {
  return context_rows(st.context(context), st.reader({context, reader}));
}

}  // namespace

int64_t Engine::anchor_queries(ContextId context, int32_t reader) const {
  const QueryAnchor* a = state_->context(context).query_anchor(evictable_seq_of(*state_, context, reader));
  return a ? a->count : 0;
}

std::vector<std::vector<int32_t>> Engine::kept_positions(ContextId context, int32_t reader) const {
  const SeqId seq = evictable_seq_of(*state_, context, reader);
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

namespace {

// The rows past `window` the protected window of a layer with `budget` rows gains after the
// context's reply tokens: it grows with them, but never past the budget less the sinks.
int64_t window_extra(const ContextState& c, int64_t budget) {
  const cache::eviction::EvictionConfig& e = c.options.eviction;
  const int64_t room = std::max<int64_t>(0, budget - e.sinks - e.window);
  return std::min(e.window_extra(c.output_tokens), room);
}

const StepMass* mass_of(const std::vector<StepMass>& mass, SeqId seq) {
  const auto it = std::find_if(mass.begin(), mass.end(), [&](const StepMass& m) { return m.seq == seq; });
  return it == mass.end() ? nullptr : &*it;
}

// Evicts `seq` (over its budgets) down to them: the policy's keep sets per layer, the loss
// bound against the last step's mass, then the cache's eviction.
void evict_seq(cache::PagedKvCache& cache, Engine::State& st, const LlamaModel& model, const ContextState& c, SeqId seq,
               const std::vector<int64_t>& budgets, const std::vector<StepMass>& mass, StepStats& stats) {
  const cache::CacheLayout& layout = cache.layout();
  const auto tokens = static_cast<int64_t>(c.tokens.size());
  at::Tensor anchor;  // capkv: float32 [layers, heads, head_dim]
  if (c.needs_query_anchor()) {
    st.grow_rope(model, tokens + c.options.eviction.capkv_future_positions);
    anchor = rotated_anchor(c, seq, st, model.config(), tokens);
  }
  cache::KeepSets keep(static_cast<size_t>(layout.num_lanes()));
  for (int64_t layer = 0; layer < layout.num_layers; ++layer) {
    const int64_t budget = budgets[static_cast<size_t>(layer)];
    const std::vector<std::vector<int64_t>> chosen = c.policy->keep_layer(
        layer_candidates(cache, st, seq, layer, *c.policy, anchor, window_extra(c, budget)), budget);
    for (int64_t g = 0; g < layout.num_groups(); ++g) {
      const int64_t lane = layout.lane(layer, g);
      const std::vector<int64_t> live = cache.manager().live_rows(seq, lane);
      std::vector<int64_t>& k = keep[static_cast<size_t>(lane)];
      for (int64_t i : chosen[static_cast<size_t>(g)]) k.push_back(live[static_cast<size_t>(i)]);
    }
  }
  if (const StepMass* m = mass_of(mass, seq)) {
    const LossBound bound = eviction_loss_bound(cache, seq, keep, *m, model.config().num_heads / model.config().num_kv_heads);
    stats.loss_bound += bound.sum;
    stats.loss_bound_terms += bound.terms;
  }
  const cache::EvictionOutcome out = cache.evict(seq, keep);
  stats.rows_evicted += out.rows_evicted;
  for (size_t p = 0; p < out.blocks_dropped.size(); ++p) stats.blocks_dropped[p] += out.blocks_dropped[p];
}

// Packs `seq`'s masked rows away (compaction) so their blocks return. Packing copies a shared
// block it writes into; when the pools are too short for that, the masked rows wait for the
// next eviction phase.
void pack_seq(cache::PagedKvCache& cache, SeqId seq, StepStats& stats) {
  const cache::CacheLayout& layout = cache.layout();
  int64_t masked = 0;
  cache::KeepSets live(static_cast<size_t>(layout.num_lanes()));
  for (int64_t lane = 0; lane < layout.num_lanes(); ++lane) {
    live[static_cast<size_t>(lane)] = cache.manager().live_rows(seq, lane);
    masked += cache.manager().sequence(seq).lanes[static_cast<size_t>(lane)].num_evicted;
  }
  if (cache.can_compact(seq, live).ok && cache.compact(seq, live)) stats.rows_packed += masked;
}

}  // namespace

void Engine::evict(StepStats& stats) {
  const log::Stopwatch watch;
  std::vector<StepMass> mass;  // the last step's, used once
  mass.swap(state_->step_mass);
  const cache::CacheLayout& layout = cache_->layout();
  stats.blocks_dropped.assign(static_cast<size_t>(cache_->manager().num_pools()), 0);
  for (auto& [id, c] : state_->contexts) {
    if (!c.policy) continue;
    const auto tokens = static_cast<int64_t>(c.tokens.size());
    const std::vector<int64_t> budgets =
        layer_budgets(*c.policy, layout.num_layers, c.options.eviction.budget_rows(tokens), tokens);
    for (SeqId seq : c.evictable_seqs()) {
      if (over_budget(cache_->manager().sequence(seq), layout, *c.policy, budgets)) {
        evict_seq(*cache_, *state_, model_, c, seq, budgets, mass, stats);
      }
      // Apart from the eviction, so that a call after a failed one packs what it left.
      if (worth_packing(cache_->manager().sequence(seq))) pack_seq(*cache_, seq, stats);
    }
  }
  stats.evict_seconds = watch.seconds();
}

}  // namespace lorakv::runtime
