// tests/kernels/lora_attention_case.h: a random fused-attention case. It draws each base's
// shared rows, each agent's residual rows and private rows, lays them out the way cache/
// stores them (blocks of a pool in a shuffled order, rows in blocks, int32 positions per
// slot; residual rows parallel to the base rows of their lane), builds the kernel's views
// over that storage, and keeps the same values dense for tests/reference/.
#pragma once

#include <ATen/ATen.h>

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lorakv/kernels/lora_attention.h"
#include "tests/reference/lora_attention_reference.h"

namespace lorakv::testing {

struct AgentSpec {
  int64_t num_queries = 1;
  int64_t v_rank = 0;  // 0: no v adapter
  int64_t k_rank = 0;  // 0: no K-LoRA
  bool k_as_delta = false;  // with k_rank: the kernel reads stored full-width deltas of C_k B_k instead
  int shares_a_with = -1;    // an earlier agent of the same base whose C rows it reads (shared A), own B
  int64_t private_rows = 0;  // positions after the shared context, full width, its own
  int64_t base = 0;
  int64_t mass_first_query = 0;  // only queries from here on add attention mass
};

struct CaseSpec {
  uint64_t seed = 0;
  int64_t heads = 4, kv_heads = 2, dim = 64;
  // Every pool's element type; int8 applies to base pools (shared and private rows) and
  // leaves residual and key-delta pools in float32.
  kernels::ElementType storage = kernels::ElementType::kFloat32;
  bool hadamard = false;  // int8 base rows stored as H x (PagedStorage::hadamard)
  kernels::ElementType q_dtype = kernels::ElementType::kFloat32;
  kernels::ElementType out_dtype = kernels::ElementType::kFloat32;
  int64_t block_size = 16;
  int64_t residual_block_size = 0;  // 0: block_size
  int64_t context = 100;            // positions of each base's shared context
  int64_t num_bases = 1;
  int64_t heads_per_lane = 0;       // 0: all KV heads share one token set
  bool per_head_residual = false;   // C rows hold one C per KV head of the lane
  bool residuals_in_one_pool = false;  // every C stream of a rank in one pool (as cache/ keeps them), else a pool each
  bool evicted = false;             // lanes keep a random ~70% of rows: gaps, different per lane
  bool shuffled = false;            // rows out of position order
  bool keys_before_rope = false;
  bool compact_rope = false;        // keys rotated to compacted positions, not the stored ones
  bool rope_from_row = false;       // with compact_rope (not shuffled): given as LaneRows::rope_from_row, not per slot
  bool random_query_positions = false;  // queries anywhere in the agent's context, not at its end
  int64_t window = 0;
  kernels::AttentionMass mass = kernels::AttentionMass::kNone;
  std::vector<AgentSpec> agents;

  std::string describe() const;
};

// Dense rows of one lane (hpl KV heads), values already rounded to the storage dtype.
struct LaneData {
  at::Tensor k, v;            // float [N, hpl, D]: as the kernel reads them
  struct Int8 {               // int8 storage: what the pool holds
    at::Tensor q, scale, values;  // int8 [N, hpl, D], float [N, hpl], float [N, hpl, D]
  } k_int8, v_int8;
  at::Tensor positions;       // int64 [N]
  at::Tensor rope_positions;  // int64 [N]
};

class LoraAttentionCase {
 public:
  explicit LoraAttentionCase(CaseSpec spec);

  const CaseSpec& spec() const { return spec_; }
  // The views (valid while this object lives). vector_path, threads and stats left unset.
  kernels::LoraAttentionParams params() const;
  // integer_qk: LoraAttentionParams::integer_qk. The reference follows the form that ran.
  void run(std::optional<cpu::VectorPath> path, int64_t threads = 0, kernels::LoraAttentionStats* stats = nullptr,
           kernels::LoraAttentionPlan* plan = nullptr, std::optional<bool> integer_qk = std::nullopt);
  // Whether the last run rounded the queries to int16 (integer QK against int8 keys stored
  // after RoPE): the reference then reads the queries so rounded, as the kernel does.
  bool queries_rounded() const { return queries_rounded_; }

  // Outputs of the last run (every output is NaN before a run), per agent (float32 copies).
  at::Tensor out(int64_t agent) const { return outs_[agent].to(at::kFloat); }
  const at::Tensor& lse(int64_t agent) const { return lses_[agent]; }
  // [num agents of the base or 1, kv_heads, rows]
  const at::Tensor& shared_mass(int64_t base) const { return shared_mass_[base]; }
  const at::Tensor& private_mass(int64_t agent) const { return private_mass_[agent]; }
  int64_t shared_rows(int64_t base, int64_t kv_head) const;
  int64_t private_rows(int64_t agent, int64_t kv_head) const;
  reference::LoraRefAgent reference_input(int64_t agent) const;
  reference::LoraRefResult reference(int64_t agent) const;
  const at::Tensor& rope_cos() const { return rope_cos_; }
  const at::Tensor& rope_sin() const { return rope_sin_; }

  // Views, for tests that break one field on purpose.
  std::vector<kernels::SharedBase>& bases() { return bases_; }
  std::vector<kernels::AgentAttention>& agents() { return agents_; }

 private:
  struct Pool {  // one storage: its tensors, next free block in the shuffled order
    at::Tensor k, v, positions, rope_positions;  // base pools: all; residual: k only
    at::Tensor k_scales, v_scales;               // int8 base pools: float [blocks, block_size, hpl]
    std::vector<int32_t> order;
    size_t next = 0;
    kernels::PagedStorage view;
  };
  struct Residual {  // one C stream of one agent (or its shared-A group)
    std::vector<at::Tensor> c;  // per lane, float [N, (hpl,) r]
    Pool* pool = nullptr;
    std::vector<kernels::LaneRows>* lanes = nullptr;
  };

  int64_t lanes() const { return spec_.kv_heads / hpl_; }
  Pool& new_pool(bool base, int64_t blocks, int64_t block_size, std::vector<int64_t> row_shape);
  std::vector<kernels::LaneRows>& place(Pool& pool, const std::vector<int64_t>& rows_per_lane);
  std::vector<LaneData> draw_rows(int64_t first_position, int64_t count, int64_t rope_offset);
  void write_base(Pool& pool, std::vector<kernels::LaneRows>& lanes, const std::vector<LaneData>& data);
  Residual draw_residual(int64_t base, int64_t rank);
  at::Tensor draw_b(int64_t rank);
  void build_agent(int64_t a);
  void store_key_deltas(int64_t a, kernels::KeyDelta& view);
  void make_outputs();
  void reset_outputs();

  CaseSpec spec_;
  int64_t hpl_ = 1, rope_rows_ = 0;
  at::Tensor rope_cos_, rope_sin_;
  std::deque<Pool> pools_;
  std::deque<std::vector<int32_t>> tables_;
  std::deque<std::vector<kernels::LaneRows>> lane_sets_;
  std::vector<std::vector<LaneData>> shared_data_;  // per base, per lane
  std::vector<Pool*> base_pool_;                    // per base
  std::vector<std::vector<kernels::LaneRows>*> shared_lanes_;
  std::vector<std::vector<LaneData>> private_data_;  // per agent, per lane
  std::vector<Residual> v_res_, k_res_;              // per agent
  std::map<int64_t, Pool*> residual_pools_;          // per rank, with residuals_in_one_pool
  std::vector<std::vector<at::Tensor>> k_delta_;     // per agent (k_as_delta), per lane: float [N, hpl, D] as stored
  std::vector<at::Tensor> b_v_, b_k_;                // per agent, float [kv_heads, r, D]
  std::vector<at::Tensor> q_, q_positions_, outs_, lses_, shared_mass_, private_mass_;
  std::vector<kernels::SharedBase> bases_;
  std::vector<kernels::AgentAttention> agents_;
  bool queries_rounded_ = false;
  mutable std::vector<std::optional<reference::LoraRefResult>> reference_;  // per agent, per query form
};

// Tolerances by dtype, see the comment in lora_attention_case.cpp.
struct Tolerance {
  double out = 0, lse = 0, mass = 0;
};
Tolerance tolerance_for(const CaseSpec& spec);

// Compares every agent's outputs with the reference; returns "" or what differs.
std::string compare_with_reference(const LoraAttentionCase& c, const Tolerance& tol);

// Every vector path this CPU can run, lowest first.
std::vector<cpu::VectorPath> runnable_paths();

// A path and its QK form (LoraAttentionParams::integer_qk).
struct KernelForm {
  cpu::VectorPath path;
  bool integer_qk = false;
  std::string name() const;
};
// Every form this CPU can run: each runnable path with float32 QK, and with integer QK
// where the path has the int16 dot product.
std::vector<KernelForm> runnable_forms();

}  // namespace lorakv::testing
