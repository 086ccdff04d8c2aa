// cache/eviction/eviction_config.h: the eviction keys, one set for the engine's context
// options, sessions and YAML, `lorakv perplexity` and `lorakv generate`. Kept apart from the
// policies (eviction_policy.h) because the engine's public header carries it: a change to
// how policies choose should not rebuild everything that includes the engine. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lorakv::cache::eviction {

// docs/eviction.md has each key with its default and the policies' definitions.
struct EvictionConfig {
  std::string policy = "none";   // one of policy_names()
  int64_t budget_tokens = 0;     // most live rows per lane (on average over layers); 0: budget_fraction decides
  double budget_fraction = 0;    // in (0, 1]: of the context's tokens so far; 0 with 0 tokens: no budget
  int64_t sinks = 4;             // first positions never evicted
  int64_t window = 16;           // most recent live rows never evicted (snapkv family: also its observation window)
  // A protected window that grows with the output (HAE's decode-time window, DDES): while the
  // context's newest tokens are replies (Engine::commit_private since the last append), the
  // newest window + floor(window_growth * those tokens) live rows are protected, never more
  // than the layer's budget less the sinks. 0: the window stays `window`.
  double window_growth = 0;
  std::vector<std::pair<int64_t, int64_t>> protected_spans;  // [begin, end) positions never evicted
  // Whose attention mass scores a shared row: "sum" of every reader's, "max" over readers,
  // or the "writer"'s alone (the work writing the rows); "auto": sum for h2o, writer for the
  // snapkv family (SnapKV observes the prompt's own queries) and capkv (whose anchor is the
  // writer's mean query; capkv takes only auto or writer).
  std::string scoring = "auto";
  // pyramidkv's per-layer budgets: "pyramid" (PyramidKV's linear decline, steepness
  // pyramid_beta), "flat", or "list" (layer_weights: one weight per layer, scaled so the
  // layers' mean budget is the budget).
  std::string layer_budgets = "pyramid";
  std::vector<double> layer_weights;
  double pyramid_beta = 20;
  double head_floor = 0.2;       // adakv: each KV head keeps at least this share of the per-head budget
  int64_t leverage_rank = 8;     // leverage: the top eigen-directions of the keys' second moment
  double capkv_tau = 5;          // capkv: sharpness of the query-key weights exp(tau * cos)
  int64_t capkv_future_positions = 512;  // capkv: positions after the context its anchor's RoPE averages over
  // Compute the eviction loss bound (docs/eviction.md) at each eviction into StepStats: the
  // kernel then returns every reader's attention mass each step (its second QK pass).
  bool loss_bound = false;

  bool enabled() const { return policy != "none"; }
  // Rows a lane may keep when the context holds `tokens` positions; -1: unlimited.
  int64_t budget_rows(int64_t tokens) const;
  // Rows past `window` the protected window gains after `output_tokens` reply tokens.
  int64_t window_extra(int64_t output_tokens) const;
  // "sum", "max" or "writer": `scoring` with "auto" resolved for the policy.
  std::string resolved_scoring() const;
  // Throws ConfigError naming the key (eviction.policy, eviction.budget...) for a value no
  // policy takes. `where` prefixes the key (a YAML path, a command-line flag).
  void check(const std::string& where = "eviction") const;
};

// The names `policy` takes, `scoring` takes and `layer_budgets` takes.
const std::vector<std::string>& policy_names();
const std::vector<std::string>& scoring_names();
const std::vector<std::string>& layer_budget_names();

}  // namespace lorakv::cache::eviction
