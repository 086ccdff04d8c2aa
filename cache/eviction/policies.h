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
  bool needs_scores() const override { return false; }

 protected:
  std::vector<int64_t> choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                              int64_t room) const override;
};

// H2O (Zhang et al., 2023): heavy hitters by accumulated attention mass, plus the recent
// window. The score of a row is the mass it has received from every query of every reader
// since it was written (summed over the query heads of its lane); ties go to the newer row.
class H2oPolicy final : public EvictionPolicy {
 public:
  using EvictionPolicy::EvictionPolicy;
  bool needs_scores() const override { return true; }

 protected:
  std::vector<int64_t> choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                              int64_t room) const override;
};

// SnapKV (Li et al., 2024): each row scored by the attention the newest `window` queries
// of the step that wrote rows gave it (the observation window), averaged with its
// neighbours (a window of kPoolWidth rows, as kvpress's SnapKVPress pools with
// avg_pool1d(kernel_size=5, padding=2), the padding counted as zeros), then the best rows
// beside the protected ones. The scores are recomputed at every such step, not summed.
// lorakv's departures from kvpress: a lane sums the mass over its KV heads' query heads and
// window queries where kvpress averages (the same order within a lane); a lane is a layer
// unless each KV head keeps its own rows (EngineOptions::per_head_token_sets), where
// kvpress keeps per KV head; and it runs after every appended chunk, not once per prefill.
class SnapKvPolicy final : public EvictionPolicy {
 public:
  static constexpr int64_t kPoolWidth = 5;
  using EvictionPolicy::EvictionPolicy;
  bool needs_scores() const override { return true; }
  bool scores_from_observation_window() const override { return true; }

 protected:
  std::vector<int64_t> choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                              int64_t room) const override;
};

}  // namespace lorakv::cache::eviction
