// cli/perplexity_eval.h: perplexity of a token sequence under the engine, window by window,
// with the context's eviction policy at work: each window is a fresh `full` context read by
// the base model, processed in chunks of all-logits steps (the engine evicts between them),
// and every token after the window's first is scored by the logits of the token before it.
// After each window, what every lane kept can be handed out (--dump-kept).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "lorakv/cache/cache_types.h"
#include "lorakv/cache/eviction/eviction_config.h"
#include "lorakv/runtime/llama_model.h"

namespace lorakv::cli {

struct PerplexitySettings {
  std::vector<std::pair<int64_t, int64_t>> windows;  // [begin, end) of the tokens, each >= 2 long
  int64_t chunk = 256;                               // most tokens per step
  cache::eviction::EvictionConfig eviction;
  std::optional<int32_t> bos;  // when set, replaces each window's first token (never scored)
  bool per_head_token_sets = false;  // one token set per KV head (EngineOptions), not one per layer
  std::optional<cache::StorageDtype> kv_dtype;  // EngineOptions::kv_dtype
  bool rerotate = false;                        // EngineOptions::rerotate
};

// What one lane (a layer, or one KV head of it with per-head token sets) of a window's
// context still holds after the window's last step: its live rows.
struct KeptLane {
  int64_t layer = 0;
  int64_t group = 0;               // the KV head with per-head token sets; else 0
  std::vector<int32_t> positions;  // in the window (0 = its first token), ascending
  std::vector<float> scores;       // per position, the attention mass H2O ranks by; empty without one
};

// Sums so far; after the last window, the whole run's.
struct PerplexityTotals {
  double nll_sum = 0;  // nats, over the tokens scored
  int64_t tokens_scored = 0;
  int64_t tokens_processed = 0;  // rows run through the model
  int64_t windows = 0;
  int64_t steps = 0;
  int64_t kv_bytes_peak = 0;        // the most KV bytes in use after any step (eviction done)
  int64_t kv_bytes_high_water = 0;  // the pools' own peak, inside steps too (before eviction)
  int64_t kv_bytes_final = 0;       // after the last step of the last window, before its release
  int64_t rows_evicted = 0;
  double seconds = 0, evict_seconds = 0, kernel_seconds = 0;
  // The eviction loss bound (--loss-bound; StepStats::loss_bound), summed, and its terms.
  double loss_bound = 0;
  int64_t loss_bound_terms = 0;
  double loss_bound_mean() const { return loss_bound_terms > 0 ? loss_bound / static_cast<double>(loss_bound_terms) : 0; }

  double nll_mean() const { return tokens_scored > 0 ? nll_sum / static_cast<double>(tokens_scored) : 0; }
  double ppl() const { return std::exp(nll_mean()); }
};

// Called after each window with its index (from 0), its peak KV bytes after a step, and the totals so far.
using WindowDone = std::function<void(int64_t window, int64_t kv_bytes_peak, const PerplexityTotals& so_far)>;

// Called after each window's last step, before its context is released: the window's index,
// the tokens it ran (with the BOS replacement) and its lanes, layer-major.
using WindowKept =
    std::function<void(int64_t window, const std::vector<int32_t>& tokens, const std::vector<KeptLane>& lanes)>;

// Scores `tokens` (ids of `model`'s vocabulary) over settings.windows. Throws CapacityError
// when a step is deferred (the pools, sized for the longest window and a chunk, should not).
PerplexityTotals score_perplexity(const runtime::LlamaModel& model, const std::vector<int32_t>& tokens,
                                  const PerplexitySettings& settings, const WindowDone& on_window = nullptr,
                                  const WindowKept& on_kept = nullptr);

}  // namespace lorakv::cli
