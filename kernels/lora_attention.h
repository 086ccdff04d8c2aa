// kernels/lora_attention.h: the fused Flash-LoRA attention op for one layer. The new queries
// of one or more agents attend over the shared base K/V rows of their context, each agent's
// low-rank residual rows on top of them (V = V_base + C_v B_v, optionally K = K_base +
// RoPE(C_k B_k)), and then each agent's own private full-width rows, in one tiled pass with
// online softmax. Full-width adapter values or keys are never written to memory.
//
// Everything here is a plain view (pointers, strides, block tables, counts) over storage the
// caller owns: cache/ fills them from its block pools without copying rows, and the CPU code
// in kernels/cpu/ never sees a framework tensor. Torch-free header.
//
// Math per query row (agent a, token t, query head h in KV group g = h / (heads / kv_heads)):
//   s_j = scale * q . k_j          k_j: base key (+ RoPE(C_k B_k,g) with K-LoRA)
//   o   = sum_j p_j v_base_j + (sum_j p_j c_j) B_v,g        p = softmax(s) over visible rows
// Two accumulators per row, P.V_base (head_dim wide) and P.C (rank wide), rescaled together;
// the epilogue multiplies P.C by the agent's B slice of the KV head. A row is visible to a
// query when its stored position is <= the query's position (and, with a sliding window,
// query position - row position < window): never by row index, since eviction and
// compaction move rows.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "lorakv/common/cpu_features.h"

namespace lorakv::kernels {

// Highest rank a residual stream may have.
inline constexpr int64_t kMaxLoraAttentionRank = 128;

// Element type of stored rows and of queries/outputs. kInt8 is for base pools only (shared
// and private K/V rows), with a float32 scale per row and KV head beside the rows
// (PagedStorage::k_scales): the tile loader converts a row to float32 on chip, as it does
// bfloat16, so no dequantised copy of the cache is ever made.
enum class ElementType : uint8_t { kFloat32, kBFloat16, kInt8 };

const char* element_type_name(ElementType type);
inline int64_t element_bytes(ElementType type) {
  return type == ElementType::kFloat32 ? 4 : type == ElementType::kBFloat16 ? 2 : 1;
}

// One pool of paged rows: `num_blocks` blocks of `block_size` rows. Row r of block b of KV
// head i (inside the row) starts at element b * block_stride + r * row_stride + i * head_stride.
//   base pools (K and V):  cache's [num_blocks, block_size, heads_per_group, head_dim]
//                           -> block_stride = block_size * heads_per_group * head_dim,
//                              row_stride = heads_per_group * head_dim, head_stride = head_dim
//   residual pools (C):     cache's [num_blocks, block_size, rank]
//                           -> block_stride = block_size * rank, row_stride = rank,
//                              head_stride = 0 (one C for every KV head of the lane) or rank
//                              (rows hold [heads, rank]: a C per KV head on a shared token set)
struct PagedStorage {
  const void* k = nullptr;  // base: keys; residual: C rows
  const void* v = nullptr;  // base: values; null for residual pools
  ElementType dtype = ElementType::kFloat32;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t block_stride = 0;  // elements
  int64_t row_stride = 0;    // elements
  int64_t head_stride = 0;   // elements
  // Base pools: int32 [num_blocks, block_size], each row's stored token position (the
  // causal mask and the sliding window read it). Unused for residual pools.
  const int32_t* positions = nullptr;
  // Base pools, optional: int32 [num_blocks, block_size], the position each key is (or is
  // to be) rotated to by RoPE, when it differs from the stored position (keys moved to
  // compact positions). Null: the stored position.
  const int32_t* rope_positions = nullptr;
  // Base pools: true when keys are stored before RoPE; the kernel rotates each key tile on
  // chip to its row's rope position.
  bool keys_before_rope = false;
  // int8 base pools: float32 scales, one per row and KV head of the row; the scale of
  // (block b, row r, head i in the row) is at k_scales[(b * block_size + r) * scale_row_stride + i]
  // (v_scales alike), and a stored value x reads as x * scale. Null for other dtypes.
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  int64_t scale_row_stride = 0;  // scales per row: at least the row's KV heads
  // int8 base pools, optional: each head's K and V rows are stored rotated, as H x with H the
  // orthonormal Walsh-Hadamard matrix of head_dim (a power of two; H = H^T = H^-1), which
  // spreads outlier channels over the row before it is quantised. The kernel never rotates
  // a row back: scores use H q (q . k = Hq . Hk), the V accumulator is rotated once per
  // query at the end, and only keys it must combine with other keys in their own frame
  // (K-LoRA, key deltas, keys before RoPE) are rotated on chip.
  bool hadamard = false;
};

// One lane's rows (one token set): block ids into the storage, in row order.
struct LaneRows {
  const int32_t* blocks = nullptr;  // [ceil(num_rows / block_size)]
  int64_t num_rows = 0;
  // The largest position a row of the lane is rotated to (its rope position, else its stored
  // position), from the caller's bookkeeping. Needed where keys are rotated on chip (keys
  // stored before RoPE, K-LoRA): the kernel checks it against the RoPE table instead of
  // reading every row's position from storage. -1: not given.
  int64_t max_rope_position = -1;
  // Optional, uint8 [num_rows]: 0 for a row evicted from this reader's view while its block
  // stays (other rows of the block are kept, or another context shares it). Such a row is
  // masked like a future token: it gets no score, no probability and no mass. Null: every
  // row is visible.
  const uint8_t* live = nullptr;
  // >= 0: row i of the lane is rotated to position rope_from_row + i, its index among the
  // lane's rows (endless streaming: keys stored before RoPE take compact positions that stay
  // below the model's context however far the stored positions go; runtime/engine.h,
  // EngineOptions::rerotate). -1: the storage's rope_positions, else the stored position.
  int64_t rope_from_row = -1;
};

// The rows of every KV head of one layer: lanes[l] holds KV heads
// [l * heads_per_lane, (l + 1) * heads_per_lane) (cache's head groups). heads_per_lane ==
// num_kv_heads: one token set for the layer; 1: each KV head its own (per-head eviction).
struct PagedRows {
  const PagedStorage* storage = nullptr;
  const LaneRows* lanes = nullptr;  // [num_kv_heads / heads_per_lane]; null = no rows
  int64_t heads_per_lane = 0;
};

// One adapted module (v, or k before RoPE) of one agent: its residual rows C = X A and its
// B. The C lanes run parallel to the lanes of the agent's shared rows: residual row i of
// lane l belongs to shared row i of lane l, and every shared row needs one. Agents of a
// shared-A group point at the same C with their own B.
struct LowRankStream {
  int64_t rank = 0;  // 0: module not adapted (no residual); else 1..kMaxLoraAttentionRank
  const PagedStorage* c_storage = nullptr;
  const LaneRows* c_lanes = nullptr;  // [number of shared lanes]
  // float32, the LoRA scale folded in: element (KV head g, rank j, dim d) at
  // b[g * b_head_stride + j * b_rank_stride + d] (B^T sliced per KV head: [kv_heads, rank, head_dim]).
  const float* b = nullptr;
  int64_t b_head_stride = 0;
  int64_t b_rank_stride = 0;
};

// The other way to serve a K adapter: each shared row's full-width key delta of one agent
// (K_agent - K_base), stored rather than rebuilt from C_k B_k. Rows run parallel to the
// shared rows like C; the storage has the base pools' layout (head_stride = head_dim, no v,
// no positions). After RoPE when the base keys are; before it when they are stored before
// RoPE (then base + delta is rotated). It reads head_dim values per key instead of rank, and
// costs a full-width row per token per agent in memory; lora_attention_bench measures where
// it beats the expansion.
struct KeyDelta {
  const PagedStorage* storage = nullptr;  // null: none
  const LaneRows* lanes = nullptr;        // [number of shared lanes]
};

// One agent's queries and outputs, all [num_queries, num_heads, ...] in PyTorch order.
struct AgentAttention {
  int64_t num_queries = 0;
  const void* q = nullptr;  // [num_queries, num_heads, head_dim], RoPE applied
  ElementType q_dtype = ElementType::kFloat32;
  int64_t q_row_stride = 0;   // elements between queries
  int64_t q_head_stride = 0;  // elements between heads
  const int64_t* q_positions = nullptr;  // [num_queries]
  LowRankStream v;  // residual on values
  LowRankStream k;  // residual on keys (K-LoRA), C_k stored before RoPE
  KeyDelta k_delta;  // or, instead of k, the stored full-width key deltas
  // The agent's own full-width rows after the shared part (its instruction, its reply so
  // far; in `full` mode all its rows). No residual applies to them.
  PagedRows private_rows;
  void* out = nullptr;  // [num_queries, num_heads, head_dim], element type out_dtype
  ElementType out_dtype = ElementType::kFloat32;
  int64_t out_row_stride = 0;
  int64_t out_head_stride = 0;
  // Optional: float32 [num_queries, num_heads], the natural log-sum-exp of each row's
  // scaled scores over its visible rows (-inf when it sees none).
  float* lse = nullptr;
  int64_t lse_row_stride = 0;
  // Optional, with AttentionMass != kNone: float32 [num_kv_heads, private rows of that
  // head's lane], the mass each private row received from this agent.
  float* private_mass = nullptr;
  int64_t private_mass_head_stride = 0;
  // With AttentionMass != kNone: only queries from this index on add mass (an observation
  // window of the last queries, SnapKV); 0: every query; num_queries: none.
  int64_t mass_first_query = 0;
};

// Agents [first_agent, first_agent + num_agents) read the same shared base rows: each base
// tile is loaded once per call for all of them.
struct SharedBase {
  PagedRows rows;  // lanes null or with 0 rows: the agents have private rows only
  int64_t first_agent = 0;
  int64_t num_agents = 0;
  // Optional, with AttentionMass != kNone: float32, the mass each shared row received,
  // element (agent i of the group, KV head g, row r) at
  // mass[i * mass_agent_stride + g * mass_head_stride + r] (i = 0 for kSumOverAgents).
  float* mass = nullptr;
  int64_t mass_agent_stride = 0;
  int64_t mass_head_stride = 0;
};

// What eviction reads: the normalised attention each row received, summed over the query
// heads of its KV group and over an agent's queries. Decode (one query per agent): raw
// scores are kept and normalised with the final log-sum-exp; a window of queries: a second
// QK pass with the stored log-sum-exp.
enum class AttentionMass : uint8_t { kNone, kPerAgent, kSumOverAgents };

// Measured by the op (bytes loaded from the views' storage, counted as tiles are loaded).
struct LoraAttentionStats {
  ::lorakv::cpu::VectorPath path = ::lorakv::cpu::VectorPath::kScalar;  // the path that ran
  int64_t base_bytes_read = 0;      // shared and private K, V, positions
  int64_t residual_bytes_read = 0;  // C rows (v and k)
  int64_t mass_bytes_read = 0;      // what the second QK pass for attention mass re-read
  int64_t work_items = 0;           // (base, KV head, key range) pieces run in parallel
  int64_t key_splits = 0;           // most pieces one (base, KV head) was split into
  int64_t threads = 0;              // threads that ran the work items
  bool plan_reused = false;         // the call ran the plan an earlier call made (LoraAttentionPlan)
  bool integer_qk = false;          // the integer QK form ran (LoraAttentionParams::integer_qk; it acts on int8 items only)
};

namespace cpu {
struct PlanStorage;
}

// The work plan of a call (FlashInfer's plan/run split): its work items (key ranges per
// thread), the layout of the rows' partial results, the merge lists and the scratch. It
// depends only on the call's shape: the bases and their agents, each agent's queries and
// ranks, the rows of every lane, the threads and the attention-mass mode, never on the
// pointers or values. A call given a plan runs it when the shape is the one it was made
// for and plans afresh into it otherwise, so the layers of an engine step (one shape unless
// eviction left layers with different rows) plan once per step. Not thread-safe: one call
// at a time per plan.
class LoraAttentionPlan {
 public:
  LoraAttentionPlan();
  ~LoraAttentionPlan();
  LoraAttentionPlan(const LoraAttentionPlan&) = delete;
  LoraAttentionPlan& operator=(const LoraAttentionPlan&) = delete;

  int64_t plans_built() const;  // calls that planned afresh
  int64_t plans_reused() const;  // calls that ran the plan as it was
  cpu::PlanStorage& storage() { return *storage_; }

 private:
  std::unique_ptr<cpu::PlanStorage> storage_;
};

struct LoraAttentionParams {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // a multiple of 32 in 32..256 (64 and 128 in the models)
  float scale = 0;       // softmax scale, usually 1/sqrt(head_dim)
  int64_t window = 0;    // > 0: sliding window (query position - row position < window)
  // RoPE in Hugging Face's rotate_half layout, float32 [rope_rows, head_dim / 2]: needed
  // with K-LoRA or keys stored before RoPE; every rotated row's position must be below rope_rows.
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  int64_t rope_rows = 0;
  const SharedBase* bases = nullptr;  // agents must be listed base by base
  int64_t num_bases = 0;
  const AgentAttention* agents = nullptr;
  int64_t num_agents = 0;
  AttentionMass mass = AttentionMass::kNone;
  // Vector code to run; unset: cpu::selected_vector_path() (LORAKV_CPU_PATH may lower it).
  std::optional<::lorakv::cpu::VectorPath> vector_path;
  // QK against an int8 base (keys stored after RoPE) as integer dot products: the queries of
  // such an item rounded to int16 per row and head (scale max|q| / 32767, a relative error
  // of at most 2^-16 of the row's largest element), each score an exact int32 sum of int16 x
  // int8 products times the two scales. Unset: wherever the path has the int16 dot product
  // (cpu::has_vnni); true asks for it (an error where the CPU lacks it); false keeps float32.
  std::optional<bool> integer_qk;
  int64_t num_threads = 0;  // 0: ATen's intra-op thread count
  LoraAttentionStats* stats = nullptr;  // optional
  // Optional: the plan to run or refill (see LoraAttentionPlan); null: the calling thread's
  // own, which is kept and reused the same way.
  LoraAttentionPlan* plan = nullptr;
};

// Runs the op on the CPU. Throws InvalidArgumentError naming what disagrees (shapes,
// strides, ranks above kMaxLoraAttentionRank, residual rows missing for shared rows, block
// ids outside the pool, positions outside the RoPE table, missing outputs) before touching
// any output, and ConfigError for a vector path this CPU cannot run. Scratch memory is kept
// per calling thread and reused, so steady-state calls do not allocate.
void lora_attention(const LoraAttentionParams& params);

}  // namespace lorakv::kernels
