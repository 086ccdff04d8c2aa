// runtime/engine_state.h: the engine's contexts and readers (internal to runtime/engine*.cpp).
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "lorakv/cache/cache_types.h"
#include "lorakv/cache/eviction/eviction_policy.h"
#include "lorakv/runtime/engine.h"

namespace lorakv::runtime {

// One residual stream a reader reads (v, or k before RoPE): its key in the shared sequence,
// the A that fills it per layer (the reader's own in base_shared, the group's shared A in
// base_lr_shared) and the reader's B in the kernel's layout.
struct ReaderStream {
  cache::ContentKey key;
  adapters::ModuleId module = adapters::ModuleId::kV;
  std::vector<int64_t> ranks;  // per layer; 0 where not adapted
  std::vector<at::Tensor> a;   // per layer: [rank, hidden] in the model dtype, undefined at rank 0
  std::vector<at::Tensor> b;   // per layer: float32 [kv_heads, rank, head_dim] contiguous (scale folded), or undefined
};

// capkv's anchor of one sequence: the queries before RoPE of the work writing its rows, at
// positions >= the policy's sinks, summed per layer and query head as the steps run them
// (SequenceRows::query_sum carries it through save and restore).
struct QueryAnchor {
  at::Tensor sum;      // float32 [layers, heads, head_dim]; undefined before the first query
  int64_t count = 0;   // queries summed (the same at every layer and head)
  // `add` (float32 [layers, heads, head_dim]) and `n` more queries.
  void add(const at::Tensor& more, int64_t n);
};

struct ReaderState {
  std::shared_ptr<const adapters::Adapter> adapter;  // null: the base model
  AdapterIdentity identity;                          // base_model() for the base model
  SeqId own_seq;                  // full mode: the reader's own rows of the context
  std::vector<ReaderStream> streams;  // residual modes: the streams it reads (v first, then k)
  // Private rows: a suffix sequence whose rows follow the context's first `private_after`
  // tokens; the reader sees only those while it holds private rows.
  SeqId private_seq;
  int64_t private_after = 0;
  std::vector<int32_t> private_tokens;
  // Writer author's fast form (keeps_author_rows): the same rows again in the shared layout,
  // a suffix sequence (shared_base_key) of base rows from the reader's hidden states with
  // the C rows of its streams_to_fill, which commit_private adopts into the shared rows.
  // Invalid otherwise; it lives and goes with private_seq.
  SeqId author_rows;
  QueryAnchor own_anchor;  // capkv in full: the queries that wrote own_seq
  // An activated LoRA reader (aLoRA): the position where its adapted span begins, the last
  // occurrence of its invocation tokens in its first private work; -1 before that work.
  int64_t active_from = -1;
  bool left = false;  // remove_reader ran: every field above is empty

  // An aLoRA reader's context is the base model's: it processes context tokens with the base
  // weights, writes and reads base rows (keyed as the base model's, so other contexts' base
  // readers share them), keeps no residual rows; only its private work uses the adapter.
  bool activated() const { return adapter && adapter->activated(); }
  const adapters::Adapter* context_adapter() const { return activated() ? nullptr : adapter.get(); }
  AdapterIdentity context_identity() const { return activated() ? AdapterIdentity::base_model() : identity; }
};

struct ContextState {
  ContextOptions options;
  std::vector<int32_t> tokens;  // the trajectory
  // Per token, who wrote its text (writer author): the identity its author agent reads the
  // context with (ReaderState::context_identity; an aLoRA agent's is the base model's), or
  // base_model() for text no agent wrote. Kept in every mode (a few runs: one per turn).
  cache::WriterRuns authors;
  int64_t output_tokens = 0;    // of those, the newest that came from replies (commit_private) since the last append
  SeqId shared_seq;             // every mode but full; created when first processed
  std::vector<ReaderState> readers;
  // base_lr_shared: the context's streams (v, k), filled by whoever writes the shared rows.
  std::vector<ReaderStream> group_streams;
  // Every residual stream the live readers read, by key: its ranks per layer and how many
  // readers read it (base_shared: readers of one adapter read one stream; base_lr_shared: one
  // per shared-A group). Kept by add_reader_streams and remove_reader.
  struct StreamUse {
    std::vector<int64_t> ranks;
    int32_t readers = 0;
  };
  std::map<cache::ContentKey, StreamUse> streams;
  const ReaderStream* group_stream(const cache::ContentKey& key) const;  // null when none
  // options.eviction's policy; null for none. Shared with forks (policies are immutable).
  std::shared_ptr<const cache::eviction::EvictionPolicy> policy;
  QueryAnchor shared_anchor;  // capkv: the queries that wrote shared_seq
  // The sequences eviction keeps within the budget: shared_seq, or the readers' own_seq.
  std::vector<SeqId> evictable_seqs() const;
  // capkv: whether the policy needs an anchor, and the anchor of `seq` (one of
  // evictable_seqs()); null for another sequence.
  bool needs_query_anchor() const;
  QueryAnchor* query_anchor(SeqId seq);
  const QueryAnchor* query_anchor(SeqId seq) const;
};

// The attention mass one reader's queries put this step on the rows of a sequence whose
// context asks for the eviction loss bound (EvictionConfig::loss_bound), kept until the
// eviction after the step (rows do not move in between: only eviction packs).
struct ReaderMass {
  const ReaderStream* value_stream = nullptr;  // the reader's V residual stream, if it reads one
  SeqId private_seq;                           // its private rows (never evicted), if any
  int64_t queries = 0;                         // the queries whose mass is here (from mass_first_query on)
  int64_t stride = 0;                          // rows per KV head in `mass`
  std::vector<std::vector<float>> mass;        // per layer: float32 [num_kv_heads, stride]; row r of the lane
  std::vector<std::vector<int64_t>> rows_read; // per layer: rows the reader read, per lane group
};

struct StepMass {
  SeqId seq;
  std::vector<ReaderMass> readers;
};

struct Engine::State {
  std::map<int64_t, ContextState> contexts;
  int64_t next_context = 0;
  int64_t next_seq = 0;
  int64_t adopted_commits = 0;  // commits whose private rows became the context's rows
  int64_t committed_tokens_processed_again = 0;  // tokens of the other commits
  at::Tensor rope_cos, rope_sin;  // float32 [rows, head_dim / 2], grown on demand
  // The last committed step's mass for the loss bound, until the eviction after it uses it.
  std::vector<StepMass> step_mass;
  // rope_cos and rope_sin grown to hold positions below `rows` (the model's tables).
  void grow_rope(const LlamaModel& model, int64_t rows);

  ContextState& context(ContextId id);
  const ContextState& context(ContextId id) const;
  ReaderState& reader(ReaderRef ref);
  const ReaderState& reader(ReaderRef ref) const;
  SeqId new_seq() { return SeqId(next_seq++); }
};

// Refuses eviction keys this engine cannot serve (adakv without per-head lanes, a weight
// list of the wrong length), naming the key (engine_eviction.cpp).
void check_eviction_fits(const cache::eviction::EvictionConfig& eviction, const cache::CacheLayout& layout);

}  // namespace lorakv::runtime
