// cache/eviction/capkv.cpp: the candidates of the highest capacity scores (computed by the
// engine when it evicts, runtime/eviction_scores.h).
//
// kvpress's CapPress (0.5.5) departs from the paper: it normalises the keys and the anchor
// (a cosine, not a dot product, so tau has one scale across heads), shifts each head's
// weights by their maximum before exp, rotates the anchor by the RoPE averaged over the
// next n_future_positions positions (the keys are cached rotated, the queries to come are
// not yet), and takes u_i = v_i as the row's output direction.
// lorakv departs from kvpress: it evicts after every chunk, not once per prefill, so the
// anchor is the mean of every query the work writing the rows has run in the context from
// position `sinks` on (summed as it runs, across chunks), and q_len is the context's tokens
// at eviction; A sums over the lane's live rows after the sinks (earlier evictions removed
// the rest); a lane sums its KV heads' scores unless each KV head keeps its own rows
// (EngineOptions::per_head_token_sets); the sinks, the window and protected spans are
// protected (kvpress protects only its n_sink sinks, scored max + 1).
#include "lorakv/cache/eviction/policies.h"
#include "lorakv/cache/eviction/ranking.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

std::vector<int64_t> CapKvPolicy::choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                                         int64_t room) const {
  LORAKV_ASSERT(lane.scores.size() == lane.positions.size(), "capkv needs a score per row");
  return top_rows(lane.scores, candidates, room);
}

}  // namespace lorakv::cache::eviction
