// cli/perplexity_eval.cpp: the window loop over the engine and the scoring of each step's logits.
#include "lorakv/cli/perplexity_eval.h"

#include <algorithm>
#include <functional>
#include <string>

#include "lorakv/cache/cache_manager.h"
#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"

namespace lorakv::cli {
namespace {

int64_t longest_window(const PerplexitySettings& s) {
  int64_t longest = 0;
  for (const auto& [begin, end] : s.windows) longest = std::max(longest, end - begin);
  return longest;
}

// Pools for one window at a time: its rows, and a chunk and a block more so that a step
// before eviction and a packing copy always fit.
runtime::EngineOptions engine_options(const PerplexitySettings& s) {
  runtime::EngineOptions o;
  const int64_t longest = longest_window(s);
  const int64_t rows = longest + std::min(s.chunk, longest) + o.block_size;
  o.base_rows = (rows + o.block_size - 1) / o.block_size * o.block_size;
  o.prefill_chunk = std::min(s.chunk, longest);
  o.per_head_token_sets = s.per_head_token_sets;
  o.kv_dtype = s.kv_dtype;
  o.rerotate = s.rerotate;
  return o;
}

// The live rows of every lane of the window's context. The engine holds no other context
// while a window runs, and a `full` context with one reader keeps its rows in that reader's
// one sequence, so the cache's only sequence is it.
std::vector<KeptLane> kept_lanes(const runtime::Engine& engine) {
  const cache::CacheManager& manager = engine.cache().manager();
  const std::vector<SeqId> seqs = manager.sequences();
  LORAKV_ASSERT(seqs.size() == 1, "a perplexity window should hold one sequence, not " << seqs.size());
  const cache::SequenceState& s = manager.sequence(seqs.front());
  const cache::CacheLayout& layout = engine.cache().layout();
  std::vector<KeptLane> lanes(s.lanes.size());
  for (size_t i = 0; i < lanes.size(); ++i) {
    const cache::BaseLane& l = s.lanes[i];
    KeptLane& k = lanes[i];
    k.layer = layout.layer_of(static_cast<int64_t>(i));
    k.group = static_cast<int64_t>(i) % layout.num_groups();
    for (int64_t r = 0; r < l.table.num_rows; ++r) {
      if (!l.is_live(r)) continue;
      k.positions.push_back(l.positions[static_cast<size_t>(r)]);
      if (!l.scores.empty()) k.scores.push_back(l.scores[static_cast<size_t>(r)]);
    }
  }
  return lanes;
}

// The summed -log p of the tokens the rows of `logits` predict inside `window`: row j, at
// window position first + j, predicts the token at first + j + 1. Adds the rows scored.
double score_rows(const at::Tensor& logits, int64_t first, const std::vector<int32_t>& window, int64_t& scored) {
  const int64_t n = std::min<int64_t>(logits.size(0), static_cast<int64_t>(window.size()) - 1 - first);
  if (n <= 0) return 0;  // the window's last token predicts nothing inside it
  const auto from = window.begin() + first + 1;
  const std::vector<int64_t> next(from, from + n);
  const at::Tensor targets = at::tensor(next, at::kLong).unsqueeze(1);              // int64 [n, 1]
  const at::Tensor log_probs = at::log_softmax(logits.narrow(0, 0, n), /*dim=*/1);  // float32 [n, vocab]
  const at::Tensor picked = log_probs.gather(1, targets);                           // float32 [n, 1]
  scored += n;
  return -picked.to(at::kDouble).sum().item<double>();
}

void add_step_stats(const runtime::StepStats& s, PerplexityTotals& t) {
  ++t.steps;
  t.tokens_processed += s.tokens_processed;
  t.rows_evicted += s.rows_evicted;
  t.evict_seconds += s.evict_seconds;
  t.kernel_seconds += s.kernel_seconds;
  t.loss_bound += s.loss_bound;
  t.loss_bound_terms += s.loss_bound_terms;
}

// One window as a fresh context read by the base model, teacher-forced through the driver
// (every row's logits, eviction between chunks); returns its peak KV bytes after a step.
int64_t score_window(runtime::Engine& engine, const std::vector<int32_t>& window, const PerplexitySettings& s,
                     PerplexityTotals& t, const std::function<void(const std::vector<KeptLane>&)>& on_kept) {
  runtime::ContextOptions options;
  options.mode = runtime::SharingMode::kFull;
  options.eviction = s.eviction;
  const runtime::ContextId ctx = engine.create_context(options, {nullptr});
  engine.append(ctx, window);
  int64_t peak = 0;
  const runtime::StepHook after_step = [&](runtime::Engine& e, const runtime::StepResult& r) {
    add_step_stats(r.stats, t);
    t.kv_bytes_final = e.memory().cache.bytes_in_use;
    peak = std::max(peak, t.kv_bytes_final);
  };
  std::vector<runtime::DriverJob> jobs(1);
  jobs[0].reader = {ctx, 0};
  jobs[0].max_chunk = s.chunk;
  jobs[0].all_logits = true;
  jobs[0].on_output = [&](const runtime::StepOutput& out) {
    t.nll_sum += score_rows(out.logits, out.first_position, window, t.tokens_scored);
  };
  try {
    runtime::Driver(engine, after_step).run(jobs);
  } catch (const runtime::CapacityError& e) {
    throw runtime::CapacityError(
        "a step of a " + std::to_string(window.size()) + "-token window (chunks of " + std::to_string(s.chunk) +
            ") did not fit the KV pools: " + e.message(),
        {"", "--context", "pools of " + std::to_string(engine.options().base_rows) + " rows per lane", "",
         "a smaller --context or --chunk"});
  }
  if (on_kept) on_kept(kept_lanes(engine));
  engine.release_context(ctx);
  return peak;
}

}  // namespace

PerplexityTotals score_perplexity(const runtime::LlamaModel& model, const std::vector<int32_t>& tokens,
                                  const PerplexitySettings& settings, const WindowDone& on_window,
                                  const WindowKept& on_kept) {
  PerplexityTotals t;
  if (settings.windows.empty()) return t;
  const log::Stopwatch watch;
  runtime::Engine engine(model, engine_options(settings));
  for (size_t i = 0; i < settings.windows.size(); ++i) {
    const auto [begin, end] = settings.windows[i];
    std::vector<int32_t> window(tokens.begin() + begin, tokens.begin() + end);
    if (settings.bos) window.front() = *settings.bos;
    std::function<void(const std::vector<KeptLane>&)> kept;
    if (on_kept) kept = [&](const std::vector<KeptLane>& lanes) { on_kept(static_cast<int64_t>(i), window, lanes); };
    const int64_t peak = score_window(engine, window, settings, t, kept);
    t.kv_bytes_peak = std::max(t.kv_bytes_peak, peak);
    ++t.windows;
    t.seconds = watch.seconds();
    if (on_window) on_window(static_cast<int64_t>(i), peak, t);
  }
  t.kv_bytes_high_water = engine.memory().cache.peak_bytes_in_use;
  t.seconds = watch.seconds();
  return t;
}

}  // namespace lorakv::cli
