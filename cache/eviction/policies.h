// cache/eviction/policies.h: the policies behind EvictionPolicy, one file each.
#pragma once

#include "lorakv/cache/eviction/eviction_policy.h"

namespace lorakv::cache::eviction {

// StreamingLLM (Xiao et al., 2023): attention sinks plus the most recent rows; no scores.
// Beyond the protected rows it keeps the newest candidates, so the kept set is the sinks
// and one recent window of `budget - sinks` rows.
class StreamingLlmPolicy final : public EvictionPolicy {
 public:
  using EvictionPolicy::EvictionPolicy;
  ScoreSource score_source() const override { return ScoreSource::kNone; }

 protected:
  std::vector<int64_t> choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                              int64_t room) const override;
};

// H2O (Zhang et al., 2023): heavy hitters by accumulated attention mass, plus the recent
// window. The score of a row is the mass it has received from every scoring query since
// it was written (summed over the query heads of its lane; readers combined as `scoring`
// says); ties go to the newer row.
class H2oPolicy final : public EvictionPolicy {
 public:
  using EvictionPolicy::EvictionPolicy;
  ScoreSource score_source() const override { return ScoreSource::kAccumulatedMass; }

 protected:
  std::vector<int64_t> choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                              int64_t room) const override;
};

// SnapKV (Li et al., 2024): each row scored by the attention the newest `window` queries
// of the step that wrote rows gave it (the observation window), averaged with its
// neighbours (a window of kPoolWidth rows, as kvpress's SnapKVPress pools with
// avg_pool1d(kernel_size=5, padding=2), the padding counted as zeros, over the rows before
// the window only, as kvpress cuts the window off first), then the best rows beside the
// protected ones. The scores are recomputed at every such step, not summed.
// lorakv's departures from kvpress: a lane sums the mass over its KV heads' query heads and
// window queries where kvpress averages (the same order within a lane); a lane is a layer
// unless each KV head keeps its own rows (EngineOptions::per_head_token_sets), where
// kvpress keeps per KV head; the sinks are protected too (kvpress's SnapKV protects only
// the window); and it runs after every appended chunk, not once per prefill.
class SnapKvPolicy : public EvictionPolicy {
 public:
  static constexpr int64_t kPoolWidth = 5;
  using EvictionPolicy::EvictionPolicy;
  ScoreSource score_source() const override { return ScoreSource::kObservationMass; }

 protected:
  std::vector<int64_t> choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                              int64_t room) const override;
  // Each row's pooled window mass; the window's own rows score the float maximum.
  std::vector<float> observed_scores(const LaneCandidates& lane) const;
};

// PyramidKV (Cai et al., 2024): SnapKV's scores and choice, with a budget per layer.
// `layer_budgets: pyramid` is kvpress's PyramidKVPress.get_layer_budget: the first layer
// keeps 2b - b/beta rows, the last b/beta, linearly between (capped by the context's length
// less the window); where that pyramid does not fit (b/beta below the window), every layer
// keeps b, as kvpress does. `flat` keeps b everywhere (SnapKV); `list` scales b by one
// weight per layer (DynamicKV-style task profiles). The layers' mean stays b.
class PyramidKvPolicy final : public SnapKvPolicy {
 public:
  using SnapKvPolicy::SnapKvPolicy;
  int64_t layer_budget(int64_t layer, int64_t num_layers, int64_t budget, int64_t tokens) const override;
  static int64_t pyramid_budget(int64_t layer, int64_t num_layers, int64_t budget, int64_t tokens, int64_t window,
                                double beta);
};

// Ada-KV (Feng et al., 2024) over SnapKV's scores, as kvpress's AdaKVPress(SnapKVPress):
// a layer keeps `budget` rows per KV head on average, spread over its heads by score. Each
// head first keeps its protected rows and, up to `head_floor` of the budget, its own best
// rows; the rest of the layer's budget goes to the best remaining rows of any head, so a
// head whose attention is concentrated on few rows leaves room to a head that spreads it.
// Needs per-head lanes (EngineOptions::per_head_token_sets); kvpress masks the rows it
// drops, lorakv frees them.
class AdaKvPolicy final : public SnapKvPolicy {
 public:
  using SnapKvPolicy::SnapKvPolicy;
  bool budget_shared_by_layer_lanes() const override { return true; }
  std::vector<std::vector<int64_t>> keep_layer(const std::vector<LaneCandidates>& lanes, int64_t budget) const override;

 private:
  static std::vector<int64_t> unkept(const std::vector<uint8_t>& kept);
};

// The design's leverage score: row i's key k_i (before RoPE, per KV head) scored by
// ||U^T k_i||^2 / ||k_i||^2, U the `leverage_rank` top eigenvectors of the lane's key
// second-moment matrix sum_j k_j k_j^T, summed over the lane's KV heads: how much of a key
// lies in the directions the lane's keys share. No attention is needed; the engine computes
// the scores from the keys when it evicts (runtime/eviction_scores.h).
class LeveragePolicy final : public EvictionPolicy {
 public:
  using EvictionPolicy::EvictionPolicy;
  ScoreSource score_source() const override { return ScoreSource::kKeys; }

 protected:
  std::vector<int64_t> choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                              int64_t room) const override;
};

// CapKV (arXiv 2604.25975) as kvpress's CapPress scores it: per query head h, with the
// anchor mu_h (the mean query of the prompt, rotated by the RoPE averaged over the next
// `capkv_future_positions` positions), row i's weight w_i = exp(tau cos(mu_h, k_i) - max),
// A = I + sum_j (w_j + 1e-6) v_j v_j^T over the rows after the sinks, and the score
// w_i v_i^T A^-1 v_i (how much new output direction the row adds, weighted by how likely it
// is to be attended), averaged over the query heads of a KV head and summed over the lane's
// KV heads. The engine computes the scores when it evicts (runtime/eviction_scores.h);
// capkv.cpp lists the departures from the paper and from kvpress.
class CapKvPolicy final : public EvictionPolicy {
 public:
  using EvictionPolicy::EvictionPolicy;
  ScoreSource score_source() const override { return ScoreSource::kKeysValuesQueries; }

 protected:
  std::vector<int64_t> choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                              int64_t room) const override;
};

}  // namespace lorakv::cache::eviction
