// cache/eviction/eviction_policy.h: which rows of one lane stay when a context holds more
// than its token budget. A policy is a pure function of the lanes' live rows (positions,
// and a score per row when it asks for one) and the budget; the cache applies what it
// keeps (CacheManager::evict). Torch-free.
//
// Rows that are never evicted, whatever the policy: the first `sinks` positions (attention
// sinks), the `window` most recent live rows, and positions inside a protected span (a
// system prompt, an instruction, the current question); the window grows during replies
// (EvictionConfig::window_growth, LaneCandidates::window_extra). They count toward the budget; when
// they alone exceed it they are all kept and the lane holds more than the budget.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "lorakv/cache/eviction/eviction_config.h"

namespace lorakv::cache::eviction {

// Where a policy's row scores come from.
enum class ScoreSource : uint8_t {
  kNone,              // positions only (streaming_llm)
  kAccumulatedMass,   // attention mass from every scoring query since the row was written (h2o)
  kObservationMass,   // mass from the newest `window` queries of the last step that wrote rows,
                      // taken afresh at each such step (the snapkv family)
  kKeys,              // computed at eviction from the lane's keys (leverage)
  kKeysValuesQueries, // computed at eviction from the lane's keys and values and the mean query
                      // of the work that wrote the rows, summed as it runs (capkv)
};

// One lane's live rows, in row order (positions ascend).
struct LaneCandidates {
  int64_t layer = 0;
  std::vector<int32_t> positions;
  std::vector<float> scores;  // per row; empty when the policy needs none
  int64_t window_extra = 0;   // newest rows protected beyond config().window (EvictionConfig::window_growth)
};

class EvictionPolicy {
 public:
  explicit EvictionPolicy(EvictionConfig config) : config_(std::move(config)) {}
  virtual ~EvictionPolicy() = default;
  const EvictionConfig& config() const { return config_; }
  virtual ScoreSource score_source() const = 0;
  bool needs_scores() const { return score_source() != ScoreSource::kNone; }
  // Most rows each lane of `layer` (of `num_layers`) keeps, for a budget of `budget` rows
  // per lane on average over layers when the context holds `tokens` positions. Flat but
  // for pyramidkv.
  virtual int64_t layer_budget(int64_t layer, int64_t num_layers, int64_t budget, int64_t tokens) const;
  // Whether the lanes of one layer share its budget (adakv spreads it over the KV heads);
  // else each lane keeps up to the layer's budget on its own.
  virtual bool budget_shared_by_layer_lanes() const { return false; }
  // Indices into `lane` of the rows to keep, ascending: the protected rows, then the
  // policy's choice up to `budget` rows in all.
  std::vector<int64_t> keep(const LaneCandidates& lane, int64_t budget) const;
  // The same for every lane of one layer (one per KV head with per-head token sets, else
  // one), with `budget` rows per lane: per lane, or across lanes for adakv.
  virtual std::vector<std::vector<int64_t>> keep_layer(const std::vector<LaneCandidates>& lanes, int64_t budget) const;

 protected:
  // The policy's choice among the unprotected rows `candidates` (indices into `lane`,
  // ascending): at most `room` of them, in any order.
  virtual std::vector<int64_t> choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                                      int64_t room) const = 0;
  // Marks the protected rows of `lane` in `kept` (sized to the lane) and returns how many.
  int64_t protect(const LaneCandidates& lane, std::vector<uint8_t>& kept) const;

 private:
  EvictionConfig config_;
};

// The policy `config.policy` names (checked first); null for "none".
std::unique_ptr<EvictionPolicy> make_policy(const EvictionConfig& config);

}  // namespace lorakv::cache::eviction
