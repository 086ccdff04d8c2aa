// runtime/engine.h: the engine on the shared, paged cache. It hosts one base model and the
// contexts of many readers (agents, each an adapter or the base model): a context is one
// append-only token sequence (the shared trajectory) whose K/V rows its readers share as
// its ContextOptions say (runtime/sharing_mode.h, docs/sharing_modes.md). Readers
//   - process the context: build the rows the mode needs from them (their own rows in
//     `full`, their residual rows in `base_shared`, the shared rows where they are the
//     first to process a token); in chunks, beside other readers' work;
//   - run private tokens after it: their instruction and their reply so far, kept as their
//     own full rows, which the fused kernel reads after the shared rows (with writer
//     `author` in the residual modes, also in the shared layout: their author rows);
//   - commit their reply: it is appended to the context for everyone; the private rows
//     become the context's rows where they are what it keeps, and go.
// An activated LoRA (aLoRA) reader is the base model for everything about the context (base
// rows, no residual rows, in every mode); only its private work runs with the adapter, from
// the last occurrence of its invocation tokens in its first private work on, which must hold
// them (docs/sharing_modes.md, "Activated LoRA").
// One step (Engine::step) runs any mix of that work over any contexts as one batched
// forward: the step is planned once (cache rows reserved, block tables and the rows each
// reader sees), then every layer runs with that plan, and each layer's attention is one
// call of the fused kernel in which readers of one context's rows read each base tile once.
//
// A step admits its work entries one by one, in order: each is planned against the rows the
// entries before it reserved and reserved at once, or deferred (not enough free blocks)
// with its own changes undone; StepResult::admissions says which and why. Rows enter the
// prefix index only after the forward pass wrote them. A step that throws after admission
// (an allocation failure, a kernel argument error) rolls back every reservation, every row
// it created and every score and anchor it added, and rethrows: the engine is as before the
// step and stays usable. Once committed, a step throws nothing; eviction down to the
// contexts' budgets is the phase after it (Engine::evict).
// The engine runs one step when asked; runtime/driver.h is the loop that asks (chunked
// prefill, teacher-forced chunks, decoding; eviction and a hook after every step). Not
// thread-safe: one step at a time.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter.h"
#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/common/ids.h"
#include "lorakv/runtime/llama_model.h"
#include "lorakv/runtime/sharing_mode.h"

namespace lorakv::runtime {

using ContextId = StrongId<struct ContextTag>;
struct ContextState;  // engine_state.h
struct ReaderState;

// One reader of one context.
struct ReaderRef {
  ContextId context;
  int32_t index = 0;  // in the order readers were added
};

struct EngineOptions {
  // The pools' capacity in bytes. When set (> 0) it sizes the base pool (the most token rows
  // per lane that fit, base_row_bytes() each) and replaces base_rows; each residual pool (one
  // per rank, made when a rank is first needed) then holds residual_rows_per_base_row times
  // as many rows per lane (several base_shared readers each keep their own).
  int64_t kv_pool_bytes = 0;
  double residual_rows_per_base_row = 1.0;
  // Without kv_pool_bytes: pool sizes in token rows per lane (every layer and head group
  // holds that many): the base pool, and each residual pool.
  int64_t base_rows = 32768;
  int64_t residual_rows = 32768;
  int64_t block_size = 16;
  // false: one token set per layer (every KV head keeps the same tokens; one residual row
  // per token per layer); true: each KV head its own token set (per-head eviction), with
  // residual rows per KV head.
  bool per_head_token_sets = false;
  int64_t prefill_chunk = 512;  // most context tokens one reader processes in one step
  // Element type of the base pool: the shared base K/V rows and every private row. Unset:
  // the model's dtype. kInt8 stores each row (per token, per KV head) as int8 with a float32
  // scale (max |x| / 127) beside it, which the fused kernel reads directly (docs/cache_layout.md).
  std::optional<cache::StorageDtype> kv_dtype;
  // Element type of residual rows (C = X A): float32 or bfloat16; unset: the model's dtype.
  std::optional<cache::StorageDtype> residual_dtype;
  // Endless streaming: base keys are stored before RoPE and the kernel rotates each to its
  // row's index in the rows a reader reads (and a token's queries to the index its row
  // takes), always from the stored key, never rotation on rotation. A streaming_llm context
  // then runs past the model's context: RoPE positions stay below the rows kept while the
  // causal mask keeps the true positions. Contexts with another policy are refused (their
  // rows are not a prefix-and-window whose indices stay meaningful); contexts without one see
  // index = position, as without it. Costs a rotation per key tile per step. One token set
  // per layer only.
  bool rerotate = false;
  // Writer `author` in base_shared and base_lr_shared: a reply keeps its rows a second time
  // in the shared layout while it decodes (base rows and C rows beside its full rows, about
  // twice a reply's private bytes), so its commit adopts them instead of processing the
  // reply again (docs/sharing_modes.md, "Commit"). false: the reply is processed again.
  bool keep_author_rows = true;
};

// "float32" (or f32), "bfloat16" (bf16), "int8"; ConfigError naming `key` otherwise.
cache::StorageDtype parse_kv_dtype(const std::string& name, const std::string& key = "kv_dtype");
const char* kv_dtype_name(cache::StorageDtype dtype);

// Work for one reader in one step.
struct StepWork {
  enum class Kind {
    kContext,  // process context tokens the mode needs from this reader (up to max_tokens)
    kPrivate,  // run `tokens` as the reader's private rows after the context
  };
  ReaderRef reader;
  Kind kind = Kind::kContext;
  std::vector<int32_t> tokens;  // kPrivate
  int64_t max_tokens = 0;       // kContext; 0: EngineOptions::prefill_chunk
  bool all_logits = false;      // logits for every processed token, not only the last

  // `tokens` as the reader's private rows.
  static StepWork private_tokens(ReaderRef reader, std::vector<int32_t> tokens, bool all_logits = false) {
    StepWork w;
    w.reader = reader;
    w.kind = Kind::kPrivate;
    w.tokens = std::move(tokens);
    w.all_logits = all_logits;
    return w;
  }
  // Up to max_tokens (0: EngineOptions::prefill_chunk) of the context the reader's mode needs.
  static StepWork context(ReaderRef reader, int64_t max_tokens = 0, bool all_logits = false) {
    StepWork w;
    w.reader = reader;
    w.max_tokens = max_tokens;
    w.all_logits = all_logits;
    return w;
  }
};

struct StepOutput {
  // float32 [rows, vocab]: the last processed token's logits, or every processed token's
  // with all_logits; 0 rows when a kContext work item had nothing to process.
  at::Tensor logits;
  int64_t tokens_processed = 0;
  int64_t first_position = 0;  // of the first processed token
  int64_t prefix_hit_tokens = 0;  // context tokens whose rows this entry adopted from the prefix index
};

// Whether one work entry ran in this step.
struct StepAdmission {
  bool admitted = true;
  // When deferred: "base pool: 12 blocks needed, 3 free", or "waits for the rows work entry
  // 0 writes in this step" (an identical prefix: run it again next step and it adopts them).
  std::string reason;
  cache::Capacity shortfall;  // deferred for capacity: the entry's own need against what was free for it
  int64_t waits_for = -1;     // deferred to wait: the work entry writing the rows
};

// What one step did, for schedulers, benchmarks and a server's cached-token counts.
struct StepStats {
  int64_t admitted = 0, deferred = 0;  // work entries
  int64_t tokens_processed = 0;        // rows run through the model (base-writer items included)
  int64_t prefix_hit_tokens = 0;       // context tokens whose rows were adopted from the prefix index
  std::vector<int64_t> blocks_reserved;  // per pool, copies on write included
  // Host wall time of the phases: validate + admit (planning and reservation), the forward
  // pass (with the kernel), and the commit (indexing, private tokens).
  double admit_seconds = 0, run_seconds = 0, commit_seconds = 0;
  // Within run_seconds, summed over layers: writing the step's K/V/C rows into the pools,
  // building the kernel's views and arguments from the block tables, and the fused kernel
  // itself (its argument checks included).
  double write_seconds = 0, views_seconds = 0, kernel_seconds = 0;
  // The fused kernel's work plans made in the forward: 1 when every layer had the step's
  // shape (kernels::LoraAttentionPlan), more where eviction left layers with other rows.
  int64_t kernel_plans = 0;
  // Eviction after the step (contexts with a policy): rows that left the views, blocks
  // whose reference went (per pool), rows packed by defragmentation, and the host time of
  // choosing, evicting and packing. The kernel's second pass for attention mass (scoring
  // policies) is inside kernel_seconds.
  int64_t rows_evicted = 0, rows_packed = 0;
  std::vector<int64_t> blocks_dropped;
  double evict_seconds = 0;
  // The eviction loss bound (EvictionConfig::loss_bound; docs/eviction.md): summed over the
  // contexts evicted after this step, their readers, layers, query heads and the queries whose
  // mass the kernel returned, a bound on ||o - o'||_1, the change of one head's attention
  // output for this step's queries had the evicted rows been absent. loss_bound_terms counts
  // those (layer, query head, query) terms: loss_bound / loss_bound_terms is the mean bound.
  double loss_bound = 0;
  int64_t loss_bound_terms = 0;
};

struct StepResult {
  // false: some work entry was deferred (admissions says which and why; the others ran). A
  // deferred entry changed nothing: no rows, no created sequences, no pinned prefix blocks.
  bool ok = true;
  // capacity.ok false: the shortfall of the first entry deferred for capacity; else
  // blocks_needed sums the admitted entries' exact needs against blocks_free (free and
  // cached blocks) before the step.
  cache::Capacity capacity;
  std::vector<StepAdmission> admissions;  // per work entry
  std::vector<StepOutput> outputs;        // per work entry (0 logits rows when deferred)
  StepStats stats;
};

// What the cache holds, measured from the pools, with the model's and adapters' bytes.
struct EngineMemory {
  cache::CacheStats cache;
  int64_t model_weight_bytes = 0;  // the base model's weights as held
  int64_t adapter_bytes = 0;       // A and B of every adapter some reader uses (each once)
  // Every context's token ids, 4 bytes a token: the trajectory is kept whole, evicted or not
  // (Session::tokens and text return it, a save holds it, a reader added later re-reads it).
  // The cache's own per-position lists go at a sequence's first eviction (cache_manager.h).
  int64_t trajectory_bytes = 0;
};

// One sequence's rows as the pools hold them (Engine::export_context): importing them gives
// back the same attention inputs bit for bit. Without `lanes`: rows 0..n-1 at positions
// 0..n-1 in every lane. With `lanes` (a context with an eviction policy): each lane's rows as
// eviction left them, so that the restored context goes on evicting as the saved one would.
struct SequenceRows {
  cache::ContentKey key;
  std::vector<int32_t> tokens;
  std::vector<AdapterIdentity> writers;  // per position
  // The storage dtype. Without lanes, per layer: [n, kv_heads, head_dim]; with lanes, per
  // lane: [the lane's rows, heads_per_group, head_dim] (masked rows included).
  std::vector<at::Tensor> k, v;
  // int8 base rows (key.dtype kInt8): k and v hold the int8 values, and these their float32
  // scales, one per row and KV head ([n, kv_heads] per layer, [rows, heads_per_group] per
  // lane). Empty for float dtypes.
  std::vector<at::Tensor> k_scale, v_scale;
  struct Residual {
    cache::ContentKey key;
    std::vector<int64_t> ranks;            // per layer; 0 where the module is not adapted
    std::vector<AdapterIdentity> writers;  // per covered position (0..covered-1)
    // Undefined where the layer's rank is 0. Without lanes, per layer: [covered, rank]; with
    // lanes, per lane: [m, rank], beside the lane's first m rows (its rows before `covered`).
    std::vector<at::Tensor> c;
  };
  std::vector<Residual> residuals;
  // Per lane (layer-major: cache::CacheLayout::lane) when the context has an eviction policy:
  // the rows the lane holds, in order, rows evicted inside a block it keeps included.
  struct Lane {
    std::vector<int32_t> positions;  // per row, ascending
    std::vector<uint8_t> live;       // per row, 0: evicted (masked); empty: every row live
    std::vector<float> scores;       // per row, the policy's attention mass; empty: none recorded
  };
  std::vector<Lane> lanes;
  // capkv: the queries before RoPE of the work that wrote these rows, at positions >= the
  // policy's sinks, summed per layer and query head (float32 [layers, heads, head_dim]), and
  // how many were summed. Undefined and 0 for other policies.
  at::Tensor query_sum;
  int64_t query_count = 0;
};

// A context's tokens and rows, for saving it (agents/session_file.h).
struct ContextRows {
  ContextOptions options;
  std::vector<int32_t> tokens;
  // Per token, the identity its author read the context with (base_model() for text no agent
  // wrote; ContextState::authors); empty: every token text. Import takes them as they are: a
  // restored agent with the same adapter is the author again.
  std::vector<AdapterIdentity> authors;
  // Base keys stored before RoPE (a rerotating engine, EngineOptions::rerotate): only an
  // engine that stores them alike can take them back.
  bool keys_before_rope = false;
  std::optional<SequenceRows> shared;            // every mode but full, once processed
  std::vector<std::optional<SequenceRows>> own;  // per exported reader (full), once processed
};

// Bytes of the pool blocks one context's rows hold (whole blocks; a block it shares with
// another context by prefix is counted in each), by component.
struct ContextMemory {
  int64_t shared_bytes = 0;    // the context's shared rows (base rows, or full rows in full_shared)
  int64_t own_bytes = 0;       // readers' own full rows (`full`)
  int64_t residual_bytes = 0;  // residual streams (base_shared, base_lr_shared)
  int64_t private_bytes = 0;   // private rows (instructions, replies in progress; their author rows)
  int64_t total() const { return shared_bytes + own_bytes + residual_bytes + private_bytes; }
};

// What each further token of a context takes in the pools, with its readers as they are now
// (private rows not included): row sets in the base pool (each reader's own rows in `full`,
// else the one shared set) and residual streams per residual pool, by rank. A stream counts
// in the pool of every rank its layers use. Sizes whole-session admission (agents/).
struct ContextFootprint {
  int64_t base_row_sets = 0;
  std::map<int64_t, int64_t> residual_streams_by_rank;
};

class Engine {
 public:
  // Throws ConfigError when the model's head size is one the fused kernel does not take.
  explicit Engine(const LlamaModel& model, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const LlamaModel& model() const { return model_; }
  // The options as used: with kv_pool_bytes, base_rows and residual_rows are the sizes it gave.
  const EngineOptions& options() const { return options_; }
  // Bytes one token row takes in the base pool over every layer and head group (K, V and
  // its position), as the pools hold it: the unit kv_pool_bytes is divided by.
  static int64_t base_row_bytes(const LlamaModel& model, const EngineOptions& options = {});
  // The same from the model's header (a config check, before any weight loads).
  static int64_t base_row_bytes(const ModelConfig& config, at::ScalarType model_dtype, const EngineOptions& options = {});
  // The base pool's element type: options.kv_dtype, else the model's dtype.
  static cache::StorageDtype base_kv_dtype(const LlamaModel& model, const EngineOptions& options = {});

  // A context with these readers (null: the base model). Throws ConfigError naming the mode,
  // adapter and module when the mode cannot serve a reader (runtime/sharing_mode.h), or for
  // an adapter of another model or dtype. Holding the shared_ptrs pins the adapters.
  ContextId create_context(ContextOptions options, const std::vector<std::shared_ptr<const adapters::Adapter>>& readers);
  // A reader joining later; checked as create_context checks. Returns its index.
  int32_t add_reader(ContextId context, std::shared_ptr<const adapters::Adapter> adapter);
  // The reader leaves the context: its own rows (full), private rows, the residual streams
  // no other reader reads, its copies of B and its pin on the adapter go. The context's
  // shared rows stay. Its index is not reused; any later use of it is a ConfigError.
  void remove_reader(ReaderRef reader);
  // Frees every row of the context.
  void release_context(ContextId context);
  // A new context with the same tokens and readers (same indices, adapters pinned again),
  // sharing every row of the source copy-on-write: nothing is copied until one of the two
  // writes into a shared block. Throws ConfigError while a reader has private rows (a reply
  // in flight): its rows and tokens would have no owner in the copy.
  ContextId fork_context(ContextId source);
  // The context's tokens and rows, with the own rows of `readers` (in that order); with an
  // eviction policy, lane by lane with their masks and scores (SequenceRows::lanes). Throws
  // ConfigError while a reader has private rows, or for compacted rows without a policy.
  ContextRows export_context(ContextId context, const std::vector<int32_t>& readers) const;
  // A new context holding `rows`, with `readers` (export's readers, in order: reader i gets
  // rows.own[i]). Rows the prefix index holds for the same tokens, key and writers are
  // adopted instead of copied; rows with lanes are rebuilt in chunks, lane by lane. Throws
  // CapacityError when the pools cannot hold the rest (nothing is kept), ConfigError for
  // rows that do not fit this model or these readers.
  ContextId import_context(const ContextRows& rows,
                           const std::vector<std::shared_ptr<const adapters::Adapter>>& readers);

  // Appends tokens to the context; nobody has processed them yet. `author`: the reader
  // whose agent wrote them (its turn, appended as text), which writer `author` lets write
  // their rows; none for text no agent wrote. Throws ConfigError for token ids outside the
  // vocabulary, or an author that is not a reader of the context (or has left).
  void append(ContextId context, const std::vector<int32_t>& tokens, std::optional<int32_t> author = std::nullopt);

  // Runs one batched step. Throws ConfigError, before anything changes, for work the state
  // does not allow (private work for a reader that has neither processed the context nor
  // started a reply, two work items for one reader, an unknown context or reader). A reader
  // mid-reply (it has private rows) may go on replying while others append to its context.
  // Once the step's rows are committed it throws nothing; eviction is the next phase (evict).
  StepResult step(const std::vector<StepWork>& work);
  // The phase after a step: every context over its token budget evicted down to it (its
  // policy chooses; docs/eviction.md), with the loss bound from the last step's attention
  // mass; the eviction fields of `stats` (rows_evicted, blocks_dropped, rows_packed,
  // evict_seconds, loss_bound) are set. The driver calls it after every step. A throw leaves
  // the step's rows and the sequences evicted before it; the next call evicts the rest.
  void evict(StepStats& stats);

  // Context tokens `reader` still has to process (0: it can run private work).
  int64_t pending_tokens(ReaderRef reader) const;

  // The reader's private tokens (instruction, reply so far), in order.
  const std::vector<int32_t>& private_tokens(ReaderRef reader) const;
  // Appends the reader's private tokens to the context, the reader as their author. Where
  // its private rows equal the rows the context keeps for those tokens (`full`: the
  // reader's own rows; `full_shared` with writer `first` or `author`), or it kept those rows
  // while replying (writer `author` in base_shared and base_lr_shared: its author rows,
  // EngineOptions::keep_author_rows), and nothing was appended since its reply began, the
  // rows are adopted (copied over, not recomputed); otherwise they are dropped and the
  // context's writer processes the tokens like any appended text (docs/sharing_modes.md,
  // "Commit"). Returns how many tokens were appended.
  int64_t commit_private(ReaderRef reader);
  // Commits so far whose private rows were adopted, and the tokens of the other commits,
  // whose replies the context's writer processes again (what adoption would have saved).
  int64_t adopted_commits() const;
  int64_t committed_tokens_processed_again() const;
  // Drops the private rows without appending them.
  void drop_private(ReaderRef reader);

  const std::vector<int32_t>& context_tokens(ContextId context) const;
  ContextOptions context_options(ContextId context) const;
  // Reader indices handed out so far, readers that left included.
  int32_t num_readers(ContextId context) const;
  bool has_left(ReaderRef reader) const;

  EngineMemory memory() const;
  ContextMemory context_memory(ContextId context) const;
  ContextFootprint context_footprint(ContextId context) const;
  // The positions each lane of the context's rows still shows after eviction (live rows,
  // ascending), lane by lane (layer-major: one lane per layer, or per KV head with
  // per_head_token_sets): the shared rows, or in `full` reader `reader`'s own rows. Empty
  // lanes before the rows exist. What `lorakv perplexity --dump-kept` writes.
  std::vector<std::vector<int32_t>> kept_positions(ContextId context, int32_t reader = 0) const;
  // capkv: the queries summed so far into the anchor of the same rows (the shared rows, or
  // in `full` reader `reader`'s own rows); 0 for other policies.
  int64_t anchor_queries(ContextId context, int32_t reader = 0) const;
  // Most positions one context may reach: the model's context length.
  int64_t max_context_tokens() const;
  // The most tokens `context`'s trajectory may hold: the model's context, or unbounded for a
  // streaming_llm context with a token budget below it on a rerotating engine (its RoPE
  // positions stay below the rows kept; EngineOptions::rerotate).
  int64_t context_limit(ContextId context) const;
  const cache::PagedKvCache& cache() const { return *cache_; }

  struct State;  // contexts and readers (engine_state.h)

 private:
  void validate_work(const std::vector<StepWork>& work) const;

  const LlamaModel& model_;
  EngineOptions options_;
  std::unique_ptr<cache::PagedKvCache> cache_;
  std::unique_ptr<State> state_;
};

// What Engine::create_context checks of a context's options against an engine's options and
// model, without an engine: the eviction keys, rerotate's rule (streaming_llm only), a
// per-head policy's lanes, one layer weight per layer. So a session config is checked whole
// before any weight loads (agents/config_model_check.h). Throws ConfigError naming the key
// ("eviction.policy", "eviction.layer_weights", ...).
void check_context_options(const ContextOptions& context, const EngineOptions& engine, const ModelConfig& model);

// The cache has no room for work that cannot wait: thrown by the driver (runtime/driver.h)
// when a step admits nothing, by import_context for rows that do not fit, and by generate()
// for a reply's rows; names the pool.
class CapacityError : public Error {
 public:
  explicit CapacityError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kCapacity, "out of cache capacity", message, std::move(context)) {}
};

}  // namespace lorakv::runtime
