// kernels/cpu/lora_attention_plan_storage.h: the containers behind a Plan, for the dispatch
// and the plan builder only (never included by the per-path files).
#pragma once

#include <vector>

#include "lorakv/kernels/cpu/lora_attention_plan.h"

namespace lorakv::kernels::cpu {

struct PlanStorage {
  std::vector<AgentRows> agent_rows;
  std::vector<int64_t> base_of_agent;
  std::vector<int64_t> base_floats;  // partial-record floats of each base's rows
  std::vector<int64_t> base_rows;    // query rows of each base (per KV head)
  std::vector<WorkItem> items;
  std::vector<int64_t> partial_offsets;  // per item, floats into `floats`
  std::vector<int64_t> raw_offsets;      // per item, or -1 without raw scores
  std::vector<int32_t> order;
  std::vector<int64_t> merge_begin;
  std::vector<int32_t> merge_ids;
  std::vector<int64_t> lse_offset;
  std::vector<int64_t> mass_bytes;
  std::vector<float> floats;  // partial records, raw scores, lse rows, per-thread scratch
  float* lse_rows = nullptr;
  float* scratch = nullptr;
  int64_t scratch_floats = 0;
  int64_t num_threads = 1;
  // The shape the plan was made for (plan_shape) and the plan; empty: none yet.
  std::vector<int64_t> shape;
  std::vector<int64_t> next_shape;  // the call's shape, compared with `shape`
  Plan plan;
  int64_t built = 0, reused = 0;
};

// The plan of a checked call: the stored one, its counters reset, when the call's shape is
// the one it was made for (returns true), else a new one built into `storage` (false).
bool plan_for_call(const LoraAttentionParams& params, int64_t num_threads, PlanStorage& storage, Plan& plan);

}  // namespace lorakv::kernels::cpu
