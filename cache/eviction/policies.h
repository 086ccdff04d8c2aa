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

}  // namespace lorakv::cache::eviction
