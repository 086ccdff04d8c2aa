// cache/eviction/eviction_policy.h: which rows of one lane stay when a context holds more
// than its token budget. A policy is a pure function of the lane's live rows (positions,
// and the attention mass each has received when it asks for scores) and the budget; the
// cache applies what it keeps (CacheManager::evict). Torch-free.
//
// Rows that are never evicted, whatever the policy: the first `sinks` positions (attention
// sinks), the `window` most recent live rows, and positions inside a protected span (a
// system prompt, an instruction, the current question). They count toward the budget; when
// they alone exceed it they are all kept and the lane holds more than the budget.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lorakv::cache::eviction {

// The eviction keys (docs/eviction.md has each with its default): one set for the engine's
// context options, `lorakv perplexity` and `lorakv generate`.
struct EvictionConfig {
  std::string policy = "none";   // none | streaming_llm | h2o | snapkv
  int64_t budget_tokens = 0;     // most live rows per lane; 0: budget_fraction decides
  double budget_fraction = 0;    // in (0, 1]: of the context's tokens so far; 0 with 0 tokens: no budget
  int64_t sinks = 4;             // first positions never evicted
  int64_t window = 16;           // most recent live rows never evicted (snapkv: also its observation window)
  std::vector<std::pair<int64_t, int64_t>> protected_spans;  // [begin, end) positions never evicted

  bool enabled() const { return policy != "none"; }
  // Rows a lane may keep when the context holds `tokens` positions; -1: unlimited.
  int64_t budget_rows(int64_t tokens) const;
  // Throws ConfigError naming the key (eviction.policy, eviction.budget...) for a value no
  // policy takes. `where` prefixes the key (a YAML path, a command-line flag).
  void check(const std::string& where = "eviction") const;
};

// The names `policy` takes.
const std::vector<std::string>& policy_names();

// One lane's live rows, in row order (positions ascend).
struct LaneCandidates {
  int64_t layer = 0;
  std::vector<int32_t> positions;
  std::vector<float> scores;  // per row; empty when the policy needs none
};

class EvictionPolicy {
 public:
  explicit EvictionPolicy(EvictionConfig config) : config_(std::move(config)) {}
  virtual ~EvictionPolicy() = default;
  const EvictionConfig& config() const { return config_; }
  virtual bool needs_scores() const = 0;
  // true: a row's score is the mass from the last `window` queries of the step that wrote
  // rows (an observation window, SnapKV), recomputed each such step; false: accumulated
  // over every query since the row was written (H2O).
  virtual bool scores_from_observation_window() const { return false; }
  // Indices into `lane` of the rows to keep, ascending: the protected rows, then the
  // policy's choice up to `budget` rows in all.
  std::vector<int64_t> keep(const LaneCandidates& lane, int64_t budget) const;

 protected:
  // The policy's choice among the unprotected rows `candidates` (indices into `lane`,
  // ascending): at most `room` of them, in any order.
  virtual std::vector<int64_t> choose(const LaneCandidates& lane, const std::vector<int64_t>& candidates,
                                      int64_t room) const = 0;

 private:
  EvictionConfig config_;
};

// The policy `config.policy` names (checked first); null for "none".
std::unique_ptr<EvictionPolicy> make_policy(const EvictionConfig& config);

}  // namespace lorakv::cache::eviction
