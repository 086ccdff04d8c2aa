// kernels/lora_attention.cpp: the fused attention's argument checks (once per call, before
// any output is touched; O(blocks + agents), reading only the views' metadata, never rows), the vector path choice, and the threaded dispatch of the plan's
// three steps (work items, merges, attention mass) to the chosen path's kernels. The only
// ATen it uses is the thread pool.
#include "lorakv/kernels/lora_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "lorakv/common/errors.h"
#include "lorakv/kernels/cpu/lora_attention_plan_storage.h"

namespace lorakv::kernels {

const char* element_type_name(ElementType type) {
  switch (type) {
    case ElementType::kFloat32: return "float32";
    case ElementType::kBFloat16: return "bfloat16";
    case ElementType::kInt8: return "int8";
  }
  return "unknown";
}

namespace {

namespace features = ::lorakv::cpu;

#define LORA_ATTENTION_CHECK(cond, ...) LORAKV_CHECK(cond, InvalidArgumentError, "lora_attention: " << __VA_ARGS__)

// Element types of queries, outputs and residual rows; base rows may also be int8.
bool known_type(ElementType t) { return t == ElementType::kFloat32 || t == ElementType::kBFloat16; }

struct Checker {
  const LoraAttentionParams& p;

  bool rope_table() const { return p.rope_cos && p.rope_sin && p.rope_rows > 0; }

  // The lane's block ids: O(blocks), metadata only (rows are never read to be checked).
  void block_table(const PagedStorage& st, const LaneRows& lane, const std::string& what) const {
    LORA_ATTENTION_CHECK(lane.num_rows >= 0, what << " has " << lane.num_rows << " rows");
    if (lane.num_rows == 0) return;
    LORA_ATTENTION_CHECK(lane.blocks, what << " has " << lane.num_rows << " rows but no block table");
    const int64_t blocks = (lane.num_rows + st.block_size - 1) / st.block_size;
    for (int64_t i = 0; i < blocks; ++i) {
      LORA_ATTENTION_CHECK(lane.blocks[i] >= 0 && lane.blocks[i] < st.num_blocks,
                           what << ": block " << i << " of its table is " << lane.blocks[i] << ", outside the pool's "
                                << st.num_blocks << " blocks");
    }
  }

  // Keys rotated on chip: the lane's largest rope position (metadata) must be in the table.
  void rope_positions(const LaneRows& lane, const std::string& what) const {
    if (lane.num_rows == 0) return;
    LORA_ATTENTION_CHECK(lane.max_rope_position >= 0,
                         what << ": rows are rotated on chip but the lane gives no max_rope_position");
    LORA_ATTENTION_CHECK(lane.max_rope_position < p.rope_rows, what << ": a row's RoPE position " << lane.max_rope_position
                                                                    << " is outside the table's " << p.rope_rows << " rows");
    LORA_ATTENTION_CHECK(lane.rope_from_row < 0 || lane.max_rope_position >= lane.rope_from_row + lane.num_rows - 1,
                         what << ": rows are rotated to rope_from_row + row index, up to "
                              << lane.rope_from_row + lane.num_rows - 1 << ", above max_rope_position " << lane.max_rope_position);
  }

  void storage(const PagedStorage* st, bool base, int64_t row_width, const std::string& what) const {
    LORA_ATTENTION_CHECK(st, what << " has lanes but no storage");
    LORA_ATTENTION_CHECK(known_type(st->dtype) || (base && st->dtype == ElementType::kInt8),
                         what << ": unsupported storage element type " << element_type_name(st->dtype)
                              << (st->dtype == ElementType::kInt8 ? " (int8 is for base K/V rows only)" : ""));
    LORA_ATTENTION_CHECK(st->k && (!base || (st->v && st->positions)),
                         what << ": storage pointers missing (" << (base ? "k, v and positions" : "C rows")
                              << " are needed)");
    LORA_ATTENTION_CHECK(st->num_blocks > 0 && st->block_size > 0,
                         what << ": " << st->num_blocks << " blocks of " << st->block_size << " rows");
    LORA_ATTENTION_CHECK(st->row_stride >= row_width && st->block_stride >= st->block_size * st->row_stride &&
                             st->head_stride >= 0,
                         what << ": strides (block " << st->block_stride << ", row " << st->row_stride << ", head "
                              << st->head_stride << ") cannot hold rows of " << row_width << " elements in blocks of "
                              << st->block_size);
  }

  // Shared or private base rows; returns whether there are any.
  bool base_rows(const PagedRows& rows, const std::string& what) const {
    if (!rows.lanes) return false;
    LORA_ATTENTION_CHECK(rows.heads_per_lane > 0 && p.num_kv_heads % rows.heads_per_lane == 0,
                         what << ": " << rows.heads_per_lane << " KV heads per lane do not divide " << p.num_kv_heads
                              << " KV heads");
    LORA_ATTENTION_CHECK(rows.storage, what << " has lanes but no storage");
    const PagedStorage& st = *rows.storage;
    LORA_ATTENTION_CHECK(rows.heads_per_lane == 1 || st.head_stride >= p.head_dim,
                         what << ": head stride " << st.head_stride << " is below head_dim " << p.head_dim);
    storage(&st, true, (rows.heads_per_lane - 1) * st.head_stride + p.head_dim, what);
    LORA_ATTENTION_CHECK(st.dtype != ElementType::kInt8 ||
                             (st.k_scales && st.v_scales && st.scale_row_stride >= rows.heads_per_lane),
                         what << ": int8 rows need k_scales, v_scales and a scale row stride of at least "
                              << rows.heads_per_lane << " (got " << st.scale_row_stride << ")");
    LORA_ATTENTION_CHECK(!st.hadamard || (st.dtype == ElementType::kInt8 && (p.head_dim & (p.head_dim - 1)) == 0),
                         what << ": Hadamard-rotated rows must be int8 with a power-of-two head_dim (got "
                              << element_type_name(st.dtype) << ", head_dim " << p.head_dim << ")");
    LORA_ATTENTION_CHECK(!st.keys_before_rope || rope_table(),
                         what << ": keys are stored before RoPE but no RoPE table (rope_cos, rope_sin, rope_rows) was given");
    bool any = false;
    for (int64_t l = 0; l < p.num_kv_heads / rows.heads_per_lane; ++l) {
      const std::string lane = what + " lane " + std::to_string(l);
      block_table(st, rows.lanes[l], lane);
      if (st.keys_before_rope) rope_positions(rows.lanes[l], lane);
      any = any || rows.lanes[l].num_rows > 0;
    }
    return any;
  }

  int64_t longest_lane(const PagedRows& rows) const {
    int64_t most = 0;
    for (int64_t l = 0; rows.lanes && l < p.num_kv_heads / rows.heads_per_lane; ++l) {
      most = std::max(most, rows.lanes[l].num_rows);
    }
    return most;
  }

  void mass_output(const float* mass, int64_t agents, int64_t agent_stride, int64_t head_stride, int64_t rows,
                   const std::string& what) const {
    LORA_ATTENTION_CHECK(mass, what << ": attention mass was asked for but its output is missing");
    LORA_ATTENTION_CHECK(head_stride >= rows && (agents <= 1 || agent_stride >= p.num_kv_heads * head_stride),
                         what << ": mass strides (agent " << agent_stride << ", head " << head_stride
                              << ") overlap for " << agents << " agents, " << p.num_kv_heads << " KV heads and "
                              << rows << " rows");
  }

  void stream(const LowRankStream& s, const SharedBase& base, bool has_shared, bool rotated,
              const std::string& what) const {
    LORA_ATTENTION_CHECK(s.rank >= 0 && s.rank <= kMaxLoraAttentionRank,
                         what << " has rank " << s.rank << ", outside 0.." << kMaxLoraAttentionRank);
    if (s.rank == 0 || !has_shared) return;
    LORA_ATTENTION_CHECK(s.b && s.b_rank_stride >= p.head_dim && s.b_head_stride >= 0,
                         what << ": B per KV head [kv_heads, rank, head_dim] needs a pointer and a rank stride >= "
                              << p.head_dim << " (got rank stride " << s.b_rank_stride << ")");
    LORA_ATTENTION_CHECK(s.c_lanes, what << ": residual rows are missing (no C lanes) for the base's shared rows");
    storage(s.c_storage, false, s.rank, what + " C");
    LORA_ATTENTION_CHECK(!rotated || rope_table(),
                         what << ": K-LoRA rotates C_k B_k by position but no RoPE table was given");
    const PagedRows& rows = base.rows;
    for (int64_t l = 0; l < p.num_kv_heads / rows.heads_per_lane; ++l) {
      const std::string lane = what + " lane " + std::to_string(l);
      LORA_ATTENTION_CHECK(s.c_lanes[l].num_rows == rows.lanes[l].num_rows,
                           lane << " has " << s.c_lanes[l].num_rows << " residual rows for " << rows.lanes[l].num_rows
                                << " shared rows (every shared row needs its residual row)");
      LORA_ATTENTION_CHECK(rows.heads_per_lane == 1 || s.c_storage->head_stride == 0 ||
                               s.c_storage->row_stride >= (rows.heads_per_lane - 1) * s.c_storage->head_stride + s.rank,
                           lane << ": C rows of " << s.c_storage->row_stride << " elements cannot hold "
                                << rows.heads_per_lane << " heads of rank " << s.rank);
      block_table(*s.c_storage, s.c_lanes[l], lane);
      if (rotated) rope_positions(rows.lanes[l], lane);
    }
  }

  void key_delta(const KeyDelta& d, const LowRankStream& k, const SharedBase& base, bool has_shared,
                 const std::string& what) const {
    if (!d.storage || !has_shared) return;
    LORA_ATTENTION_CHECK(k.rank == 0, what << ": a k residual and stored key deltas at once (give one of them)");
    LORA_ATTENTION_CHECK(d.lanes, what << ": key delta rows are missing (no lanes) for the base's shared rows");
    const PagedRows& rows = base.rows;
    LORA_ATTENTION_CHECK(rows.heads_per_lane == 1 || d.storage->head_stride >= p.head_dim,
                         what << ": head stride " << d.storage->head_stride << " is below head_dim " << p.head_dim);
    storage(d.storage, false, (rows.heads_per_lane - 1) * d.storage->head_stride + p.head_dim, what);
    for (int64_t l = 0; l < p.num_kv_heads / rows.heads_per_lane; ++l) {
      const std::string lane = what + " lane " + std::to_string(l);
      LORA_ATTENTION_CHECK(d.lanes[l].num_rows == rows.lanes[l].num_rows,
                           lane << " has " << d.lanes[l].num_rows << " key delta rows for " << rows.lanes[l].num_rows
                                << " shared rows (every shared row needs its delta row)");
      block_table(*d.storage, d.lanes[l], lane);
    }
  }

  void output_strides(int64_t rows, int64_t row_stride, int64_t head_stride, int64_t width,
                      const std::string& what) const {
    const bool row_major = head_stride >= width && (rows <= 1 || row_stride >= p.num_heads * head_stride);
    const bool head_major = row_stride >= width && head_stride >= rows * row_stride;
    LORA_ATTENTION_CHECK(row_major || head_major, what << ": strides (row " << row_stride << ", head " << head_stride
                                                       << ") make outputs of different rows overlap");
  }

  void agent(int64_t a, const SharedBase& base, bool has_shared) const {
    const AgentAttention& ag = p.agents[a];
    const std::string what = "agent " + std::to_string(a);
    LORA_ATTENTION_CHECK(ag.num_queries > 0, what << " has " << ag.num_queries << " queries");
    LORA_ATTENTION_CHECK(ag.q && ag.q_positions && ag.out,
                         what << ": q, q_positions and out are needed (" << (ag.q ? "" : "q ")
                              << (ag.q_positions ? "" : "q_positions ") << (ag.out ? "" : "out ") << "missing)");
    LORA_ATTENTION_CHECK(known_type(ag.q_dtype) && known_type(ag.out_dtype),
                         what << ": unsupported q or out element type");
    LORA_ATTENTION_CHECK(ag.q_head_stride >= 0 && ag.q_row_stride >= 0,
                         what << ": negative q strides (" << ag.q_row_stride << ", " << ag.q_head_stride << ")");
    output_strides(ag.num_queries, ag.out_row_stride, ag.out_head_stride, p.head_dim, what + " out");
    if (ag.lse) output_strides(ag.num_queries, ag.lse_row_stride, 1, 1, what + " lse");
    stream(ag.v, base, has_shared, false, what + "'s v residual");
    stream(ag.k, base, has_shared, true, what + "'s k residual");
    key_delta(ag.k_delta, ag.k, base, has_shared, what + "'s key deltas");
    const bool has_private = base_rows(ag.private_rows, what + "'s private rows");
    // Records over shared and private rows are merged: their values must be in one frame.
    LORA_ATTENTION_CHECK(!has_private || !base.rows.lanes || !base.rows.storage ||
                             base.rows.storage->hadamard == ag.private_rows.storage->hadamard,
                         what << ": shared and private rows must both be Hadamard-rotated or neither");
    if (p.mass != AttentionMass::kNone && has_private) {
      mass_output(ag.private_mass, 1, 0, ag.private_mass_head_stride, longest_lane(ag.private_rows),
                  what + "'s private_mass");
    }
  }

  void run() const {
    LORA_ATTENTION_CHECK(p.num_heads > 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
                         p.num_heads << " query heads are not a multiple of " << p.num_kv_heads << " KV heads");
    LORA_ATTENTION_CHECK(p.head_dim >= 32 && p.head_dim <= 256 && p.head_dim % 32 == 0,
                         "head_dim " << p.head_dim << " is not a multiple of 32 in 32..256");
    LORA_ATTENTION_CHECK(std::isfinite(p.scale) && p.scale > 0, "softmax scale " << p.scale << " is not positive");
    LORA_ATTENTION_CHECK(p.window >= 0, "negative sliding window " << p.window);
    LORA_ATTENTION_CHECK(p.agents && p.num_agents > 0 && p.bases && p.num_bases > 0,
                         p.num_agents << " agents on " << p.num_bases << " bases (at least one of each)");
    int64_t next = 0;
    for (int64_t b = 0; b < p.num_bases; ++b) {
      const SharedBase& base = p.bases[b];
      const std::string what = "base " + std::to_string(b);
      LORA_ATTENTION_CHECK(base.first_agent == next && base.num_agents > 0,
                           what << " lists agents " << base.first_agent << ".." << base.first_agent + base.num_agents - 1
                                << "; bases must list agents in order from " << next << ", at least one each");
      next += base.num_agents;
      LORA_ATTENTION_CHECK(next <= p.num_agents, what << " lists agents past the " << p.num_agents << " given");
      const bool has_shared = base_rows(base.rows, what + " shared rows");
      if (p.mass != AttentionMass::kNone && has_shared) {
        mass_output(base.mass, p.mass == AttentionMass::kPerAgent ? base.num_agents : 1, base.mass_agent_stride,
                    base.mass_head_stride, longest_lane(base.rows), what + " mass");
      }
      for (int64_t a = base.first_agent; a < next; ++a) agent(a, base, has_shared);
    }
    LORA_ATTENTION_CHECK(next == p.num_agents, "the bases list " << next << " of the " << p.num_agents << " agents");
  }
};

features::VectorPath choose_path(const LoraAttentionParams& p) {
  if (!p.vector_path) return features::selected_vector_path();
  const features::CpuFeatures& features = features::detected_cpu_features();
  if (!features::supports(features, *p.vector_path)) {
    throw ConfigError("lora_attention: this CPU cannot run the requested vector path",
                      {"", "vector_path", "a path " + features.model_name + " supports",
                       features::vector_path_name(*p.vector_path), "leave it unset to use the best path"});
  }
  return *p.vector_path;
}

// Whether the call runs the path's integer QK form (LoraAttentionParams::integer_qk).
bool choose_integer_qk(const LoraAttentionParams& p, features::VectorPath path) {
  const features::CpuFeatures& features = features::detected_cpu_features();
  const bool available = features::has_vnni(features, path);
  if (!p.integer_qk) return available;
  if (*p.integer_qk && !available) {
    throw ConfigError("lora_attention: this CPU has no int16 dot product on the requested vector path",
                      {"", "integer_qk", "a path with VNNI on " + features.model_name, "true",
                       "leave it unset to use it wherever the CPU has it"});
  }
  return *p.integer_qk;
}

const cpu::PathKernels& kernels_for(features::VectorPath path, bool integer_qk) {
  switch (path) {
    case features::VectorPath::kAvx512: return integer_qk ? cpu::avx512vnni::kKernels : cpu::avx512::kKernels;
    case features::VectorPath::kAvx2: return integer_qk ? cpu::avxvnni::kKernels : cpu::avx2::kKernels;
    case features::VectorPath::kScalar: break;
  }
  return cpu::scalar::kKernels;
}

// Runs fn(task, thread) for task in [0, n) on `threads` threads, tasks taken in order from
// a shared counter (items differ in cost; the plan lists the largest first).
// Returns how many threads took part (ran the loop, whether or not any task was left).
template <typename Fn>
int64_t run_tasks(int64_t n, int64_t threads, Fn&& fn) {
  std::atomic<int64_t> next{0}, started{0};
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    started.fetch_add(1);
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i, t);
    }
  });
  return started.load();
}

}  // namespace

void lora_attention(const LoraAttentionParams& params) {
  Checker{params}.run();
  const features::VectorPath path = choose_path(params);
  const bool integer_qk = choose_integer_qk(params, path);
  const cpu::PathKernels& k = kernels_for(path, integer_qk);
  LORAKV_ASSERT(k.process_item, "vector path " << features::vector_path_name(path) << " was not built for this CPU");

  // The caller's plan, else the calling thread's, reached through a reference: a lambda run
  // on a worker thread that named the thread_local itself would get that worker's own,
  // empty instance.
  thread_local LoraAttentionPlan calling_thread_plan;
  cpu::PlanStorage& storage = (params.plan ? *params.plan : calling_thread_plan).storage();
  const int64_t threads = std::max<int64_t>(1, params.num_threads > 0 ? params.num_threads : at::get_num_threads());
  cpu::Plan plan;
  const bool reused = cpu::plan_for_call(params, threads, storage, plan);
  const int32_t* order = cpu::item_order(storage);

  const int64_t threads_run = run_tasks(plan.num_items, threads, [&](int64_t i, int64_t t) { k.process_item(plan, plan.items[order[i]], cpu::thread_scratch(storage, t)); });
  run_tasks(params.num_agents * params.num_kv_heads, threads,
            [&](int64_t i, int64_t) { k.merge_rows(plan, i / params.num_kv_heads, i % params.num_kv_heads); });
  int64_t* mass_bytes = cpu::mass_bytes(storage);
  if (params.mass != AttentionMass::kNone) {
    run_tasks(plan.num_items, threads, [&](int64_t i, int64_t t) {
      k.mass_item(plan, plan.items[order[i]], cpu::thread_scratch(storage, t), &mass_bytes[order[i]]);
    });
  }

  if (!params.stats) return;
  LoraAttentionStats& s = *params.stats;
  s = LoraAttentionStats{};
  s.path = path;
  s.work_items = plan.num_items;
  s.threads = threads_run;
  s.plan_reused = reused;
  s.integer_qk = integer_qk;
  for (int64_t i = 0; i < plan.num_items; ++i) {
    s.base_bytes_read += plan.items[i].base_bytes;
    s.residual_bytes_read += plan.items[i].residual_bytes;
    s.mass_bytes_read += mass_bytes[i];
  }
  for (int64_t i = 0; i < plan.num_items; ++i) {  // pieces of the same range: few items, so quadratic is fine
    const cpu::WorkItem& w = plan.items[i];
    int64_t pieces = 0;
    for (int64_t j = 0; j < plan.num_items; ++j) {
      const cpu::WorkItem& o = plan.items[j];
      pieces += o.base == w.base && o.kv_head == w.kv_head && o.agent == w.agent;
    }
    s.key_splits = std::max(s.key_splits, pieces);
  }
}

LoraAttentionPlan::LoraAttentionPlan() : storage_(std::make_unique<cpu::PlanStorage>()) {}
LoraAttentionPlan::~LoraAttentionPlan() = default;
int64_t LoraAttentionPlan::plans_built() const { return storage_->built; }
int64_t LoraAttentionPlan::plans_reused() const { return storage_->reused; }

}  // namespace lorakv::kernels
