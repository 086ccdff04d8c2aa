// kernels/cpu/lora_attention_plan.h: what the dispatch (kernels/lora_attention.cpp) hands to
// the vector code of each path: the checked views, the rows' partial-result layout, and the
// work items. Plain structs of pointers only: the per-path files are compiled with their own
// instruction-set flags, so they must not share inline functions or templates with the rest
// of the program (a linker could pick an AVX-512 copy for the scalar path).
#pragma once

#include <cstdint>

#include "lorakv/kernels/lora_attention.h"

namespace lorakv::kernels::cpu {

// Keys per tile: each tile is loaded (converted, rotated, transposed) once for every agent
// of its base. 64 float32 keys of head_dim 128 are 32 KiB each for K and V.
inline constexpr int64_t kTileKeys = 64;
inline constexpr int64_t kMaxHeadDim = 256;
// Query rows (of several agents and heads) computed together against one tile.
inline constexpr int64_t kBlockRows = 24;
// Floats before a partial record's accumulators (m, l, padding to 64 bytes).
inline constexpr int64_t kRecordHeader = 16;

// static: internal linkage, so no copy is shared between files built for different paths.
static constexpr int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One agent's query rows in one KV head: row = token * group_size + head-in-group. Each row
// has a partial record [m, l, pad.., acc_v (head_dim), acc_c (rank_pad)], floats.
struct AgentRows {
  int64_t num_rows = 0;
  int64_t rank_pad = 0;       // v rank rounded up to 16 (0 without a v residual)
  int64_t record_floats = 0;  // kRecordHeader + head_dim + rank_pad
  int64_t offset = 0;         // floats from the start of its base's records
  int64_t row_offset = 0;     // rows before it in its base (raw-score and lse rows)
};

// A key range of one lane of one KV head, for all agents of a base (shared rows) or one
// agent (its private rows). Written by exactly one thread.
struct WorkItem {
  int32_t base = 0;
  int32_t kv_head = 0;
  int32_t agent = -1;  // -1: the base's shared rows; else this agent's private rows
  int64_t row_begin = 0, row_end = 0;
  // Partial records of the rows it touches; record of agent a's row r at
  // partial + agent_rows[a].offset + r * record_floats (offsets into its base's layout,
  // also for a private item, whose buffer holds only its agent's records).
  float* partial = nullptr;
  // Decode attention mass: raw scaled scores, [touched rows][row_end - row_begin], row
  // index agent_rows[a].row_offset + r (relative to the item's first agent for a private item).
  float* raw_scores = nullptr;
  double cost = 0;  // for ordering: larger first
  // Counted while running.
  int64_t base_bytes = 0;
  int64_t residual_bytes = 0;
};

struct Plan {
  const LoraAttentionParams* params = nullptr;
  int64_t group_size = 0;  // query heads per KV head
  const AgentRows* agent_rows = nullptr;  // [num_agents]
  const int64_t* base_of_agent = nullptr;  // [num_agents]
  WorkItem* items = nullptr;
  int64_t num_items = 0;
  // Items merged into agent a's rows of KV head g: the shared ones of its base, then its
  // private ones: item ids merge_ids[merge_begin[a * kv_heads + g] .. merge_begin[.. + 1]).
  const int64_t* merge_begin = nullptr;
  const int32_t* merge_ids = nullptr;
  // Final lse per row, float [agent a][KV head g][row]: lse_rows + lse_offset[a] + g * rows_a + r.
  float* lse_rows = nullptr;
  const int64_t* lse_offset = nullptr;
  bool mass_from_raw_scores = false;  // decode: every agent has one query
  int64_t scratch_floats = 0;         // per thread, see scratch_floats_needed
  int64_t max_item_rows = 0;          // query rows of the largest base (an item's rows at most)
};

// Rows of the wide path's transposed queries and scores: rounded up to whole registers of the
// widest path, plus one register of slack (a block's vectors may start mid-register).
static constexpr int64_t wide_rows(int64_t rows) { return round_up(rows, 16) + 16; }

// Floats of per-thread scratch a path needs for `max_item_rows` query rows.
// Must match FusedAttention::carve (lora_attention_impl.h).
static constexpr int64_t scratch_floats_needed(int64_t head_dim, int64_t max_item_rows) {
  return max_item_rows * head_dim                                     // queries, float32, scaled
         + wide_rows(max_item_rows) * head_dim                        // the same transposed (wide path)
         + wide_rows(max_item_rows)                                   // their int16 scales (integer QK)
         + kTileKeys * head_dim / 2                                   // K as int16 (integer QK)
         + 6 * kTileKeys * head_dim                                   // K as float, K rotated, K^T, agent K, agent K^T, V
         + 2 * kTileKeys * round_up(kMaxLoraAttentionRank, 16)        // C_v, C_k tiles
         + kTileKeys * wide_rows(kBlockRows)                          // scores of a row block (either layout)
         + wide_rows(kBlockRows)                                      // the block's query positions
         + 16;                                                        // 64-byte alignment
}

// The three steps, per path. process_item fills an item's partial records (and raw
// scores); merge_rows merges one agent's rows of one KV head over its items, runs the
// epilogue and writes out / lse / plan.lse_rows; mass_item writes the attention mass of an
// item's rows (after every merge_rows).
struct PathKernels {
  void (*process_item)(const Plan& plan, WorkItem& item, float* scratch);
  void (*merge_rows)(const Plan& plan, int64_t agent, int64_t kv_head);
  void (*mass_item)(const Plan& plan, WorkItem& item, float* scratch, int64_t* bytes_read);
};

// Storage for a plan, kept per calling thread and reused, so steady-state calls do not
// allocate. Built by build_plan (lora_attention_plan.cpp, default compile flags).
struct PlanStorage;

// Fills `storage` and returns the plan of a checked call for `num_threads` threads.
Plan build_plan(const LoraAttentionParams& params, int64_t num_threads, PlanStorage& storage);
// The plan's floats: per-thread scratch of thread `t`, and the item order (largest first).
float* thread_scratch(PlanStorage& storage, int64_t t);
const int32_t* item_order(const PlanStorage& storage);
// Its per-item counters of the attention-mass pass.
int64_t* mass_bytes(PlanStorage& storage);

namespace scalar {
extern const PathKernels kKernels;
}
namespace avx2 {
extern const PathKernels kKernels;
}
namespace avx512 {
extern const PathKernels kKernels;
}
// The int16 dot product forms (integer QK against int8 bases; lora_attention_*vnni.cpp).
namespace avxvnni {
extern const PathKernels kKernels;
}
namespace avx512vnni {
extern const PathKernels kKernels;
}

}  // namespace lorakv::kernels::cpu
