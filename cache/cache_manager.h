// cache/cache_manager.h: the tensor-free bookkeeping of the paged cache: sequences, their
// per-lane block tables and row positions, residual streams aligned with base rows, one
// BlockAllocator per pool, the PrefixIndex, copy-on-write, and compaction. It never touches
// a tensor: mutations return the slots to write and the StorageOps (block copies, row moves)
// that PagedKvCache applies to its BlockPools. Tests drive it alone, in microseconds.
//
// Structure (see cache_types.h for stream / lane / slot):
//   pool 0            base rows: K and V of heads_per_group KV heads, plus each row's position
//   pool 1..          residual rows of one rank r (one pool per distinct rank), r values per
//                     row; a residual stream with a per-layer rank_pattern uses several pools
//   SequenceState     writers of positions 0..n-1 (as runs), their token ids while the
//                     sequence can still index blocks (dropped at its first eviction); per lane a base
//                     BlockTable and the positions of its rows (sorted, since appends grow and
//                     compaction is stable); residual streams.
//   ResidualStream    one adapted module (v or k) of one agent or shared-A group. It covers
//                     positions [0, covered); per lane its rows are parallel to the lane's base
//                     rows: residual row i belongs to base row i, for i < its fill, and its fill
//                     is the number of the lane's base rows with position < covered. So a KV
//                     head with its own token set has its own residual rows (r per token per
//                     head), compaction applies one plan to both, and alignment is structural.
//
// Sharing: whole full blocks are registered in the PrefixIndex while a sequence has never
// been compacted (rows written after a compaction were computed over fewer tokens, so their
// content is not a function of the token prefix). A block with reference count > 1 is
// copied before any write into it (append into a shared partial block, compaction).
// Reuse after release: an indexed block whose last reference goes stays cached (findable,
// counted free, block_allocator.h) until an allocation needs it; a sequence releases its
// tables from the end, residual rows first, so the LRU reclaims a chain's tail before the
// prefix (a system prompt) that later contexts are most likely to share.
//
// Contract: query before mutate. can_append / can_compact / match_prefix never change state;
// append / compact / create / fork / attach_residual / release do, and apply completely or
// (on a capacity shortfall, returned as std::nullopt) not at all. Not thread-safe: owned by
// one engine step at a time.
//
// Transactions: an engine step reserves rows before its forward pass writes them, and
// either keeps them or, when the step fails or defers a work item, gives them back. Between
// begin_transaction() and commit_transaction() / rollback_transaction(), create, attach,
// append and the rows' scores (add_scores, reset_scores) can be undone (each sequence's state is saved when the level first touches it;
// rollback restores it and fixes the blocks' reference counts). Levels nest: one work
// item's admission rolls back alone or merges into the step's level. Blocks enter the
// prefix index only when the outermost level commits, after the rows were written, so a
// failed step never leaves rows in the index that nobody wrote. Outside a transaction an
// append indexes its full blocks at once (the caller writes them before anyone matches).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "lorakv/cache/block_allocator.h"
#include "lorakv/cache/compaction.h"
#include "lorakv/cache/prefix_index.h"
#include "lorakv/common/position_runs.h"

namespace lorakv::cache {

struct ResidualPoolSpec {
  int64_t rank = 0;
  int64_t num_blocks = 0;
};

struct CacheConfig {
  CacheLayout layout;
  // Element type of the base pool (base K/V rows and private rows): int8 adds a scale per
  // row and KV head. Residual pools (C rows) hold float32 or bfloat16.
  StorageDtype base_dtype = StorageDtype::kFloat32;
  StorageDtype residual_dtype = StorageDtype::kFloat32;
  // An int8 base pool rotates each row by the Walsh-Hadamard matrix before quantising it
  // (block_pool.h), when head_dim is a power of two: it cut the mean logit KL against a
  // float32 cache from 0.0013 to 0.0003 on SmolLM2 (docs/cache_layout.md).
  bool int8_hadamard = true;
  // Base keys are stored before RoPE and rotated by the kernel on chip, each to its row's
  // index in the lane it is read from (kernels::LaneRows::rope_from_row): endless streaming
  // (runtime/engine.h, EngineOptions::rerotate). false: keys after RoPE at their position.
  bool keys_before_rope = false;
  int64_t num_base_blocks = 0;
  std::vector<ResidualPoolSpec> residual_pools;  // one per distinct rank
};

struct BlockTable {
  std::vector<BlockId> blocks;  // blocks.size() == ceil(num_rows / block_size)
  int64_t num_rows = 0;
};

struct BaseLane {
  BlockTable table;
  std::vector<int32_t> positions;  // per row, ascending; mirrors BlockPool's position rows
  // Per row: 0 once the row was evicted from this sequence's view while its block stays
  // (the block's other rows are kept, or it is shared). The kernel masks such rows
  // (kernels::LaneRows::live). Empty: every row is live.
  std::vector<uint8_t> live;
  int64_t num_evicted = 0;  // rows with live == 0
  // Per row, when a scoring policy accumulates attention mass (H2O): the mass the row has
  // received so far from every reader. Empty: none recorded. Moves with its row.
  std::vector<float> scores;
  int64_t num_live() const { return table.num_rows - num_evicted; }
  // Grows live and scores (when kept) with the rows appended to the table.
  void extend_row_state() {
    if (!live.empty()) live.resize(static_cast<size_t>(table.num_rows), 1);
    if (!scores.empty()) scores.resize(static_cast<size_t>(table.num_rows), 0.f);
  }
  bool is_live(int64_t row) const { return live.empty() || live[static_cast<size_t>(row)] != 0; }
  // Rows with a stored position below `limit` (positions ascend): the prefix a reader that has
  // processed that far attends over, and the index the row at `limit` takes.
  int64_t rows_below(int64_t limit) const {
    if (limit >= INT32_MAX) return table.num_rows;
    return std::lower_bound(positions.begin(), positions.end(), limit) - positions.begin();
  }
};

// Whose hidden states filled each position's rows (or, in a lookup, must have): runs of
// equal writers, since writers change once per turn, not per token.
using WriterRuns = PositionRuns<AdapterIdentity>;

struct ResidualStream {
  ContentKey key;
  std::vector<int64_t> ranks;           // per layer; 0 = module not adapted at that layer
  std::vector<int32_t> pools;           // per layer; -1 where the rank is 0
  std::vector<BlockTable> lanes;        // per lane, parallel to the base lanes
  // Positions [0, covered) have residual rows (where kept); in a suffix sequence, the
  // positions covered from its first_position on.
  int64_t covered = 0;
  WriterRuns writers;                   // per covered position (writers.size() == covered)
  std::vector<EntryId> chain;           // its indexed blocks, one entry per token block
};

struct SequenceState {
  ContentKey base_key;
  int64_t num_positions = 0;  // positions with base rows (held or evicted): first_position + 0..n-1
  // Token id of each of those positions while they may still be indexed (or adopted into an
  // indexable sequence); emptied, with keeps_tokens false, when the sequence stops indexing
  // (first eviction or compaction): nothing reads them after, and an endless evicted history
  // then costs no host bytes per token. Suffix sequences keep theirs (a commit adopts them).
  std::vector<int32_t> tokens;
  bool keeps_tokens = true;
  WriterRuns writers;                    // whose hidden states filled each position's base rows
  std::vector<BaseLane> lanes;           // layout.num_lanes(), layer-major
  std::vector<ResidualStream> residuals;  // at most one per key: find_residual
  std::vector<EntryId> base_chain;       // indexed base entries for blocks 0..size-1
  bool indexable = true;                 // false once compacted, and for suffix sequences
  // Position of tokens[0]: 0, or a suffix sequence's start (an agent's private rows after
  // the shared rows of its context, which live in another sequence).
  int64_t first_position = 0;
  // The attached residual stream of `key`, or null: the one lookup of a stream by key (a
  // sequence carries a handful, one per module and adapter or shared-A group).
  const ResidualStream* find_residual(const ContentKey& key) const;
  ResidualStream* find_residual(const ContentKey& key);
};

// Rows to keep per lane (layer-major, layout.num_lanes() of them), strictly ascending row
// indices. An empty lane keeps nothing.
using KeepSets = std::vector<std::vector<int64_t>>;

struct ResidualAppend {
  ContentKey stream;   // an attached residual stream of the sequence
  int64_t num_tokens;  // extends its coverage by this many positions
};

// One engine step's rows for one sequence: new tokens (base rows at the next positions, in
// every lane) and residual rows extending residual streams (each stream at most once), all
// written by `writer`. Base rows are added first, so residual rows may cover them.
struct AppendRequest {
  std::vector<int32_t> tokens;
  AdapterIdentity writer;
  std::vector<ResidualAppend> residuals;
};

struct Capacity {
  bool ok = true;
  std::vector<int64_t> blocks_needed;  // per pool
  std::vector<int64_t> blocks_free;    // per pool
};

struct BlockCopy {
  int32_t pool;
  BlockId src, dst;
};
struct SlotMove {
  int32_t pool;
  int64_t src_slot, dst_slot;
};
// What storage must do, in order: every copy, then every move (read all sources first).
struct StorageOps {
  std::vector<BlockCopy> copies;
  std::vector<SlotMove> moves;
};

class CacheManager;

// A compaction planned in full (CacheManager::plan_compact): the moves, and every table and
// row list of the sequence as they will be, built before anything changes.
class PlannedCompaction {
 public:
  PlannedCompaction(CacheManager& manager, SeqId seq) : manager_(&manager), seq_(seq) {}
  PlannedCompaction(PlannedCompaction&& other) noexcept;
  PlannedCompaction& operator=(PlannedCompaction&&) = delete;
  PlannedCompaction(const PlannedCompaction&) = delete;
  ~PlannedCompaction();  // uncommitted: gives back the blocks taken for copies
  const StorageOps& ops() const { return ops_; }

 private:
  friend class CacheManager;
  struct Lane {
    int64_t lane = 0;
    BlockTable base;
    std::vector<std::pair<size_t, BlockTable>> residual;  // (stream index, table after)
    std::vector<int32_t> positions;
    std::vector<uint8_t> live;
    std::vector<float> scores;
    int64_t num_evicted = 0;
  };
  CacheManager* manager_;  // null once committed or moved from
  SeqId seq_;
  int64_t first_changed_ = -1;  // the chains end before this block
  StorageOps ops_;
  std::vector<Lane> lanes_;             // the lanes that change
  std::vector<BlockRef> taken_;         // fresh blocks for copies of shared ones
  std::vector<BlockRef> replaced_;      // the shared blocks those copies replace: released at commit
  std::vector<BlockRef> unindexed_;     // own blocks whose rows change: unindexed at commit
  std::vector<BlockRef> released_;      // blocks past the new ends: released at commit
};

// Where one lane's new rows go: row j is token_offsets[j] of the request, stored at slots[j].
struct LaneSlots {
  int32_t pool = -1;  // the pool the slots are in; -1 when the lane gets no rows
  std::vector<int64_t> slots;
  std::vector<int64_t> token_offsets;
};

struct AppendSlots {
  StorageOps ops;                                // copy-on-write copies, before any row write
  int64_t first_position = 0;                    // position of tokens[0]
  std::vector<LaneSlots> base;                   // per lane (pool 0)
  std::vector<std::vector<LaneSlots>> residual;  // per request residual, per lane (its layer's pool)
};

// What one eviction did, summed over the sequence's lanes.
struct EvictionOutcome {
  int64_t rows_evicted = 0;      // base rows that left the view
  int64_t rows_masked = 0;       // evicted rows still in a block a lane keeps (earlier ones too)
  std::vector<int64_t> blocks_dropped;  // per pool: references dropped (freed when the last)
};

struct PrefixMatch {
  std::vector<EntryId> entries;  // one per matched block
  int64_t num_tokens = 0;
};

class CacheManager {
 public:
  explicit CacheManager(CacheConfig config);
  friend class PlannedCompaction;  // gives its taken blocks back

  const CacheConfig& config() const { return config_; }
  const CacheLayout& layout() const { return config_.layout; }
  int32_t num_pools() const { return static_cast<int32_t>(allocators_.size()); }
  // Pool of residual rows of `rank`, or -1 when no pool was configured for it.
  int32_t pool_for_rank(int64_t rank) const;
  // Adds a pool for residual rows of a rank no pool holds yet (an adapter loaded later with
  // another rank); returns its id. The rank must be new.
  int32_t add_residual_pool(ResidualPoolSpec spec);
  int64_t pool_rank(int32_t pool) const { return pool == 0 ? 0 : config_.residual_pools[pool - 1].rank; }
  const BlockAllocator& allocator(int32_t pool) const { return allocators_[static_cast<size_t>(pool)]; }
  const PrefixIndex& index() const { return index_; }
  // Owner of a block's rows: the stream key's adapter (agent, group or base model).
  AdapterIdentity owner_of(int32_t pool, BlockId block) const;

  bool has_sequence(SeqId seq) const { return seqs_.count(seq) > 0; }
  const SequenceState& sequence(SeqId seq) const;
  std::vector<SeqId> sequences() const;

  // Longest run of whole blocks of `tokens` whose base rows are indexed under `base_key`,
  // each row written by the writer `writers` names for its position (a block that
  // `writers` does not cover matches nothing). Pure.
  PrefixMatch match_prefix(const ContentKey& base_key, const std::vector<int32_t>& tokens,
                           const WriterRuns& writers) const;
  // A new sequence, sharing the blocks of `match` (taken from match_prefix with no
  // mutation in between). Needs no free blocks.
  void create_sequence(SeqId seq, const ContentKey& base_key, const PrefixMatch& match = {});
  // A sequence whose rows start at `first_position`: the private continuation of rows held
  // by another sequence (an agent's reply after its context's shared rows). It is never
  // indexed (its rows depend on rows it does not hold); its residual streams cover its own
  // positions from its first on.
  void create_suffix_sequence(SeqId seq, const ContentKey& base_key, int64_t first_position);
  // dst shares every block of src (copy-on-write on later writes). Needs no free blocks.
  void fork(SeqId src, SeqId dst);
  // Adds a residual stream and adopts the indexed residual blocks built on the sequence's
  // indexed base blocks whose rows `writers` wrote, position by position (as match_prefix).
  // Returns the positions covered (the agent prefills from there).
  int64_t attach_residual(SeqId seq, const ContentKey& key, std::vector<int64_t> ranks, const WriterRuns& writers);

  Capacity can_append(SeqId seq, const AppendRequest& request) const;
  std::optional<AppendSlots> append(SeqId seq, const AppendRequest& request);

  // Moves the rows of `suffix` (a suffix sequence starting right after `seq`'s last row)
  // onto the end of `seq`: its base rows, and each of its residual streams' rows onto the
  // stream of the same key in `seq`, which must cover every position of `seq` (streams of
  // `seq` the suffix lacks stay behind, to be filled later). The rows are copied (StorageOps
  // moves), tokens and writers appended, full blocks indexed; the caller releases the
  // suffix once the moves are applied. An agent's reply whose rows equal the context's rows
  // is committed this way instead of being processed again. nullopt (no change) when a pool
  // has too few free blocks.
  Capacity can_adopt_suffix(SeqId seq, SeqId suffix) const;
  std::optional<StorageOps> adopt_suffix(SeqId seq, SeqId suffix);

  Capacity can_compact(SeqId seq, const KeepSets& keep) const;
  std::optional<StorageOps> compact(SeqId seq, const KeepSets& keep);
  // compact() in two phases, for a caller that moves the rows between them: plan_compact
  // computes everything (it may throw; it changes nothing but blocks it takes for copies,
  // which go back when the plan is dropped uncommitted), commit_compact applies it without
  // allocating. So a failure never leaves tables that point at rows not yet moved.
  std::optional<PlannedCompaction> plan_compact(SeqId seq, const KeepSets& keep);
  void commit_compact(PlannedCompaction& plan) noexcept;

  // Eviction without moving a row (docs/cache_layout.md, "Eviction"): every live row of a
  // lane not in its keep set leaves the sequence's view. A block none of whose rows stay is
  // dropped from the lane's table, with the block of the same index in every residual
  // stream's lane (residual rows leave with their base rows), and its reference goes; a
  // block keeps its other rows and the left ones are masked (BaseLane::live). Nothing is
  // copied and no block is taken, so it cannot fail for capacity. Index entries of blocks
  // that lose a row go (with their dependents); blocks before the first such block stay
  // indexed and in the sequence's chains (a reader joining later adopts their residual
  // rows), and the sequence indexes nothing more (rows written later were computed over
  // the evicted history). keep: per lane, strictly ascending live rows. Not inside a
  // transaction.
  EvictionOutcome evict(SeqId seq, const KeepSets& keep);
  // Per lane, the live rows (ascending row indices).
  std::vector<int64_t> live_rows(SeqId seq, int64_t lane) const;
  // Adds mass[i] to the score of row i of the lane, i < rows (rows from the first). Inside
  // a transaction, journaled like an append: a rollback gives the scores back.
  void add_scores(SeqId seq, int64_t lane, const float* mass, int64_t rows);
  // Every row's score back to 0 (an observation window starts again); journaled alike.
  void reset_scores(SeqId seq);

  // Drops every reference the sequence holds; blocks reaching zero return to their pool.
  // Not inside a transaction.
  void release(SeqId seq);
  // Drops one residual stream of a sequence and its block references (a reader that left).
  // Not inside a transaction.
  void detach_residual(SeqId seq, const ContentKey& key);

  // See "Transactions" above.
  void begin_transaction();
  void commit_transaction();
  void rollback_transaction();
  int64_t transaction_depth() const { return static_cast<int64_t>(journal_.size()); }

  // Slots of a lane's rows in order (base: pool 0; residual: the stream's pool of that layer).
  std::vector<int64_t> base_slots(SeqId seq, int64_t lane) const;
  std::vector<int64_t> residual_slots(SeqId seq, const ContentKey& stream, int64_t lane) const;
  const ResidualStream& residual(SeqId seq, const ContentKey& stream) const;

  // Host memory of the bookkeeping (tables, positions, token arrays, index), from container sizes.
  int64_t host_metadata_bytes() const;

 private:
  SequenceState& state(SeqId seq);
  int64_t residual_index(const SequenceState& s, const ContentKey& key) const;
  uint32_t tag_for(AdapterIdentity owner);
  int64_t append_need(int32_t pool, const BlockTable& table, int64_t add) const;
  std::vector<int64_t> residual_rows_to_add(const SequenceState& s, const ResidualStream& r, int64_t lane,
                                            int64_t num_tokens) const;
  LaneSlots append_rows(int32_t pool, BlockTable& table, int64_t add, uint32_t tag, StorageOps& ops);
  void adopt_rows(int32_t pool, const BlockTable& from, BlockTable& to, uint32_t tag, StorageOps& ops);
  void release_block(int32_t pool, BlockId block);
  // n blocks of `pool` (free first, then cached ones, whose index entries go), or nullopt.
  std::optional<std::vector<BlockId>> take_blocks(int32_t pool, int64_t n, uint32_t tag);
  // Drops the index entry holding `block` and its dependents; their cached blocks become free.
  void unindex(BlockRef block);
  // One table's part of a compaction plan: its table after it, the moves, and the blocks
  // the commit unindexes, releases and replaces by the copies taken here.
  BlockTable plan_table(int32_t pool, const BlockTable& table, const std::vector<int64_t>& keep, uint32_t tag,
                        PlannedCompaction& plan);
  // Drops block `block` of one base lane and of every residual lane beside it.
  void drop_lane_block(SequenceState& s, int64_t lane, int64_t block, EvictionOutcome& out);
  // Ends the sequence's chains before `first_block` (unindexing those entries) and stops
  // indexing it.
  void cut_chains(SequenceState& s, int64_t first_block);
  // The writers of those of `left` (positions whose rows just left some lane) that no lane
  // holds any more are forgotten (PositionRuns::forget): runs stay as few as the held rows.
  void forget_writers(SequenceState& s, std::vector<int32_t> left);
  // Entries it adds to the index go to `inserted` (reserved by the caller) when given.
  void register_full_blocks(SequenceState& s, std::vector<EntryId>* inserted = nullptr);
  // Saves `seq`'s state (nullopt: it does not exist yet) the first time the innermost open
  // transaction level touches it.
  void remember(SeqId seq);
  void retain_blocks(const SequenceState& s);
  void release_blocks(const SequenceState& s);
  void release_stream_blocks(const ResidualStream& r);

  CacheConfig config_;
  std::vector<BlockAllocator> allocators_;  // per pool
  PrefixIndex index_;
  std::map<SeqId, SequenceState> seqs_;
  std::vector<AdapterIdentity> tag_owner_;  // allocator tag -> owner
  std::map<AdapterIdentity, uint32_t> owner_tag_;
  // One map per open transaction level: the state of each sequence it touched, as it was
  // when the level first touched it.
  std::vector<std::map<SeqId, std::optional<SequenceState>>> journal_;
};

}  // namespace lorakv::cache
