// cache/paged_kv_cache.h: the paged cache as the engine sees it: a CacheManager (tensor-free
// bookkeeping) plus one BlockPool per pool (tensors), kept in step. Every mutation goes
// through here so the storage ops the manager returns are applied at once. It writes base
// and residual rows where the manager placed them, gathers a lane's rows as contiguous
// tensors for the reference path (and a later runtime::KvCache adapter), and reports stats
// measured from the pools.
//
// Contract: query before mutate (can_append / can_compact / match_prefix are pure; append,
// compact, create_sequence, fork, attach_residual, release mutate). A capacity shortfall
// comes back as std::nullopt / false with nothing changed. Not thread-safe: one engine step
// at a time.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <vector>

#include "lorakv/cache/block_pool.h"
#include "lorakv/cache/cache_manager.h"

namespace lorakv::cache {

// One lane's rows, gathered into contiguous tensors (storage dtype).
struct GatheredRows {
  at::Tensor k;          // [heads, N, head_dim], after RoPE (heads = heads_per_group, or num_kv_heads for a layer)
  at::Tensor v;          // [heads, N, head_dim]
  at::Tensor positions;  // int64 [N], ascending
};

struct GatheredResidual {
  at::Tensor c;          // [N_r, rank]: row i belongs to the lane's base row i
  at::Tensor positions;  // int64 [N_r]: the positions of those base rows
};

// One append's write slots as index tensors (PagedKvCache::plan_writes).
struct WritePlan {
  struct Lane {
    int32_t pool = -1;
    at::Tensor slots;          // int64 [rows]; undefined when the lane gets no rows
    at::Tensor token_offsets;  // int64 [rows]: the request token of each row (residual lanes)
    int64_t rows_needed = 0;   // residual lanes: 1 + the largest token offset
  };
  int64_t num_tokens = 0;
  std::vector<Lane> base;                   // per lane
  std::vector<std::vector<Lane>> residual;  // per request residual, per lane
};

// The base rows of several appends written together (an engine step's items), as one
// scatter per lane and layer instead of one per append (PagedKvCache::plan_batch_writes).
struct BatchWritePlan {
  struct Lane {
    at::Tensor slots;    // int64 [rows]: every append's slots of the lane; undefined: none
    at::Tensor sources;  // int64 [rows]: each slot's row in the batch's k, v; undefined: rows
                         // first_source, first_source + 1, ... (no gather)
    int64_t first_source = 0;
  };
  std::vector<Lane> base;  // per lane
};

// One append of a batch: its slots, and the row of the batch's k, v that holds its first
// token (its tokens' rows follow in order).
struct BatchAppend {
  const AppendSlots* slots = nullptr;
  int64_t first_row = 0;
};

struct PoolUsage {
  int64_t rank = 0;  // 0 = base pool
  int64_t blocks_used = 0;    // referenced by a sequence
  int64_t blocks_cached = 0;  // unreferenced, still findable by prefix; reclaimed when needed
  int64_t blocks_free = 0;    // neither
  int64_t block_bytes = 0;  // measured from the pool's tensors
};

// Bytes are device bytes of blocks in use (whole blocks, so rows round up to the block),
// measured from the pools' allocations; metadata is the host bookkeeping.
struct CacheStats {
  int64_t base_k_bytes = 0;
  int64_t base_v_bytes = 0;
  int64_t positions_bytes = 0;
  std::map<AdapterIdentity, int64_t> residual_bytes;  // per agent (base_shared) or shared-A group
  int64_t residual_bytes_total = 0;
  int64_t metadata_bytes = 0;  // host: tables, positions mirror, token ids, prefix index
  int64_t bytes_in_use = 0;    // base K + base V + positions + residuals
  int64_t peak_bytes_in_use = 0;
  int64_t cached_bytes = 0;    // cached blocks: reusable by a prefix match, reclaimable at once
  int64_t free_bytes = 0;      // blocks neither in use nor cached
  int64_t reserved_bytes = 0;  // all pool tensors: in use + cached + free
  std::vector<PoolUsage> pools;
};

class PagedKvCache {
 public:
  explicit PagedKvCache(CacheConfig config, at::Device device = at::kCPU);

  const CacheManager& manager() const { return manager_; }
  const CacheLayout& layout() const { return manager_.layout(); }
  const BlockPool& pool(int32_t id) const { return pools_.at(static_cast<size_t>(id)); }

  PrefixMatch match_prefix(const ContentKey& base_key, const std::vector<int32_t>& tokens,
                           const WriterRuns& writers) const {
    return manager_.match_prefix(base_key, tokens, writers);
  }
  void create_sequence(SeqId seq, const ContentKey& base_key, const PrefixMatch& match = {});
  void create_suffix_sequence(SeqId seq, const ContentKey& base_key, int64_t first_position) {
    manager_.create_suffix_sequence(seq, base_key, first_position);
  }
  // Pool of residual rows of `rank`, created with `num_blocks` blocks when none exists (its
  // tensors are allocated then; existing pools never move).
  int32_t ensure_residual_pool(int64_t rank, int64_t num_blocks);
  void fork(SeqId src, SeqId dst);
  int64_t attach_residual(SeqId seq, const ContentKey& key, std::vector<int64_t> ranks, const WriterRuns& writers);
  void release(SeqId seq);
  void detach_residual(SeqId seq, const ContentKey& key) { manager_.detach_residual(seq, key); }

  Capacity can_append(SeqId seq, const AppendRequest& r) const { return manager_.can_append(seq, r); }
  // Reserves the rows (copy-on-write applied, positions written); the caller then writes
  // them with write_base / write_residual before reading them.
  std::optional<AppendSlots> append(SeqId seq, const AppendRequest& request);
  // The append's slots as index tensors (the slot mapping), built once and used at every
  // layer: write_base / write_residual then build no index per lane per layer.
  WritePlan plan_writes(const AppendSlots& slots) const;
  // k, v: [T, num_kv_heads, head_dim] for the request's T tokens, any float dtype.
  void write_base(const WritePlan& plan, int64_t layer, const at::Tensor& k, const at::Tensor& v);
  void write_base(const AppendSlots& slots, int64_t layer, const at::Tensor& k, const at::Tensor& v) {
    write_base(plan_writes(slots), layer, k, v);
  }
  // The base rows of several appends, written by write_batch_base: per lane the slots of
  // all of them and where each row is in the batch. Built once per step.
  BatchWritePlan plan_batch_writes(const std::vector<BatchAppend>& appends) const;
  // k, v: [B, num_kv_heads, head_dim], the batch's rows (any float dtype); the planned rows
  // go to their slots, one scatter per lane.
  void write_batch_base(const BatchWritePlan& plan, int64_t layer, const at::Tensor& k, const at::Tensor& v);
  // An int8 base pool: rows as a save holds them, written unchanged (values int8
  // [T, num_kv_heads, head_dim], scales float32 [T, num_kv_heads]).
  void write_base_int8(const WritePlan& plan, int64_t layer, const Int8Rows& k, const Int8Rows& v);
  // An int8 base pool: a layer's rows as stored, for a save. Without eviction (every lane holds
  // the same rows): values int8 [n, num_kv_heads, head_dim], scales float32 [n, num_kv_heads].
  std::pair<Int8Rows, Int8Rows> gather_layer_int8(SeqId seq, int64_t layer) const;
  // c: [T, rank of `layer`] for the request's residual `index` (its T positions).
  void write_residual(const WritePlan& plan, size_t index, int64_t layer, const at::Tensor& c);
  void write_residual(const AppendSlots& slots, size_t index, int64_t layer, const at::Tensor& c) {
    write_residual(plan_writes(slots), index, layer, c);
  }

  // Undo levels over create / attach / append (CacheManager, "Transactions"): the engine's
  // step reserves in one, commits after its forward wrote the rows, rolls back otherwise.
  void begin_transaction() { manager_.begin_transaction(); }
  void commit_transaction() { manager_.commit_transaction(); }
  void rollback_transaction() { manager_.rollback_transaction(); }

  // CacheManager::adopt_suffix with the rows copied; the suffix is released. false (no
  // change) when the pool is short.
  bool adopt_suffix(SeqId seq, SeqId suffix);

  Capacity can_compact(SeqId seq, const KeepSets& keep) const { return manager_.can_compact(seq, keep); }
  bool compact(SeqId seq, const KeepSets& keep);

  // Evicting whole blocks releases their references (a block is freed when no sequence
  // holds it); rows in blocks that stay are masked. No row moves and nothing is copied.
  EvictionOutcome evict(SeqId seq, const KeepSets& keep);
  // CacheManager::add_scores: attention mass for a scoring policy.
  void add_scores(SeqId seq, int64_t lane, const float* mass, int64_t rows) { manager_.add_scores(seq, lane, mass, rows); }
  void reset_scores(SeqId seq) { manager_.reset_scores(seq); }

  // The gathers return live rows only (evicted rows that are masked are left out), as the
  // kernel sees them.
  GatheredRows gather_lane(SeqId seq, int64_t layer, int64_t group) const;
  // All KV heads of a layer; requires every head group to hold the same positions.
  GatheredRows gather_layer(SeqId seq, int64_t layer) const;
  GatheredResidual gather_residual(SeqId seq, const ContentKey& stream, int64_t layer, int64_t group) const;

  CacheStats stats() const;

 private:
  int64_t bytes_in_use() const;
  void note_usage();

  CacheManager manager_;
  std::vector<BlockPool> pools_;
  int64_t peak_bytes_ = 0;
};

}  // namespace lorakv::cache
