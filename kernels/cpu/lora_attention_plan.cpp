// kernels/cpu/lora_attention_plan.cpp: the rows' partial-record layout and the work items of
// one call: each (base, KV head) shared range and each (agent, KV head) private range split
// into key ranges so that every thread has work (split-K), largest first.
#include "lorakv/kernels/cpu/lora_attention_plan_storage.h"

#include <algorithm>
#include <numeric>

namespace lorakv::kernels::cpu {
namespace {

// Below this a key range is not split further: merging costs a record per row per piece.
constexpr int64_t kMinKeysPerItem = 4 * kTileKeys;
// Most floats of partial records before key ranges stop being split finer.
constexpr int64_t kPartialFloatBudget = int64_t{64} << 20;

int64_t lane_rows(const PagedRows& rows, int64_t kv_head) {
  if (!rows.lanes || rows.heads_per_lane <= 0) return 0;
  return rows.lanes[kv_head / rows.heads_per_lane].num_rows;
}

void layout_rows(const LoraAttentionParams& p, int64_t group, PlanStorage& s) {
  s.agent_rows.assign(static_cast<size_t>(p.num_agents), AgentRows{});
  s.base_of_agent.assign(static_cast<size_t>(p.num_agents), 0);
  s.base_floats.assign(static_cast<size_t>(p.num_bases), 0);
  s.base_rows.assign(static_cast<size_t>(p.num_bases), 0);
  for (int64_t b = 0; b < p.num_bases; ++b) {
    const SharedBase& base = p.bases[b];
    for (int64_t a = base.first_agent; a < base.first_agent + base.num_agents; ++a) {
      const AgentAttention& ag = p.agents[a];
      AgentRows& r = s.agent_rows[static_cast<size_t>(a)];
      r.num_rows = ag.num_queries * group;
      r.rank_pad = ag.v.rank > 0 ? round_up(ag.v.rank, 16) : 0;
      r.record_floats = kRecordHeader + p.head_dim + r.rank_pad;
      r.offset = s.base_floats[static_cast<size_t>(b)];
      r.row_offset = s.base_rows[static_cast<size_t>(b)];
      s.base_floats[static_cast<size_t>(b)] += r.num_rows * r.record_floats;
      s.base_rows[static_cast<size_t>(b)] += r.num_rows;
      s.base_of_agent[static_cast<size_t>(a)] = b;
    }
  }
}

// Splits [0, n) into pieces of about `chunk` keys (multiples of the tile).
template <typename Fn>
void split_range(int64_t n, int64_t chunk, Fn&& fn) {
  if (n <= 0) return;
  const int64_t pieces = std::max<int64_t>(1, (n + chunk - 1) / chunk);
  const int64_t step = round_up((n + pieces - 1) / pieces, kTileKeys);
  for (int64_t begin = 0; begin < n; begin += step) fn(begin, std::min(n, begin + step));
}

double item_cost(const LoraAttentionParams& p, const PlanStorage& s, const WorkItem& w) {
  const SharedBase& base = p.bases[w.base];
  const int64_t begin = w.agent < 0 ? base.first_agent : w.agent;
  const int64_t end = w.agent < 0 ? base.first_agent + base.num_agents : w.agent + 1;
  double per_key = 2.0 * p.head_dim;  // loading K and V
  for (int64_t a = begin; a < end; ++a) {
    const AgentAttention& ag = p.agents[a];
    const double rows = static_cast<double>(s.agent_rows[static_cast<size_t>(a)].num_rows);
    per_key += rows * (2.0 * p.head_dim + (w.agent < 0 ? ag.v.rank : 0));
    if (w.agent < 0) per_key += static_cast<double>(ag.k.rank) * p.head_dim;
  }
  return per_key * static_cast<double>(w.row_end - w.row_begin);
}

// The items for key ranges of `chunk` keys; returns the floats of their partial records.
int64_t make_items(const LoraAttentionParams& p, int64_t chunk, bool raw_scores, PlanStorage& s) {
  s.items.clear();
  s.partial_offsets.clear();
  s.raw_offsets.clear();
  int64_t floats = 0;
  auto add = [&](int64_t base, int64_t head, int64_t agent, int64_t begin, int64_t end) {
    WorkItem w;
    w.base = static_cast<int32_t>(base);
    w.kv_head = static_cast<int32_t>(head);
    w.agent = static_cast<int32_t>(agent);
    w.row_begin = begin;
    w.row_end = end;
    const int64_t rows = agent < 0 ? s.base_rows[static_cast<size_t>(base)]
                                   : s.agent_rows[static_cast<size_t>(agent)].num_rows;
    const int64_t record = agent < 0 ? s.base_floats[static_cast<size_t>(base)]
                                     : rows * s.agent_rows[static_cast<size_t>(agent)].record_floats;
    // Offsets into the float buffer, made pointers once it has its size.
    s.partial_offsets.push_back(floats);
    floats += record;
    s.raw_offsets.push_back(raw_scores ? floats : -1);
    if (raw_scores) floats += round_up(rows * (end - begin), 16);
    s.items.push_back(w);
  };
  for (int64_t b = 0; b < p.num_bases; ++b) {
    for (int64_t h = 0; h < p.num_kv_heads; ++h) {
      split_range(lane_rows(p.bases[b].rows, h), chunk, [&](int64_t lo, int64_t hi) { add(b, h, -1, lo, hi); });
    }
  }
  for (int64_t a = 0; a < p.num_agents; ++a) {
    const int64_t b = s.base_of_agent[static_cast<size_t>(a)];
    for (int64_t h = 0; h < p.num_kv_heads; ++h) {
      split_range(lane_rows(p.agents[a].private_rows, h), chunk, [&](int64_t lo, int64_t hi) { add(b, h, a, lo, hi); });
    }
  }
  return floats;
}

// Keys per item: enough items for every thread (four per thread, so uneven pieces even out),
// never below kMinKeysPerItem, and no more partial records than the budget.
int64_t choose_chunk(const LoraAttentionParams& p, int64_t num_threads, bool raw_scores, PlanStorage& s) {
  int64_t total = 0, longest = 0;
  for (int64_t h = 0; h < p.num_kv_heads; ++h) {
    for (int64_t b = 0; b < p.num_bases; ++b) {
      total += lane_rows(p.bases[b].rows, h);
      longest = std::max(longest, lane_rows(p.bases[b].rows, h));
    }
    for (int64_t a = 0; a < p.num_agents; ++a) {
      total += lane_rows(p.agents[a].private_rows, h);
      longest = std::max(longest, lane_rows(p.agents[a].private_rows, h));
    }
  }
  longest = std::max<int64_t>(longest, 1);
  if (num_threads <= 1) return longest;
  int64_t chunk = std::max(kMinKeysPerItem, round_up((total + 4 * num_threads - 1) / (4 * num_threads), kTileKeys));
  while (chunk < longest && make_items(p, chunk, raw_scores, s) > kPartialFloatBudget) chunk *= 2;
  return std::min(chunk, longest);
}

void list_merges(const LoraAttentionParams& p, PlanStorage& s) {
  const auto heads = static_cast<size_t>(p.num_kv_heads);
  s.merge_begin.assign(static_cast<size_t>(p.num_agents) * heads + 1, 0);
  s.merge_ids.clear();
  for (int64_t a = 0; a < p.num_agents; ++a) {
    const int64_t b = s.base_of_agent[static_cast<size_t>(a)];
    for (int64_t h = 0; h < p.num_kv_heads; ++h) {
      for (size_t i = 0; i < s.items.size(); ++i) {
        const WorkItem& w = s.items[i];
        const bool mine = w.kv_head == h && ((w.agent < 0 && w.base == b) || w.agent == a);
        if (mine) s.merge_ids.push_back(static_cast<int32_t>(i));
      }
      s.merge_begin[static_cast<size_t>(a) * heads + static_cast<size_t>(h) + 1] =
          static_cast<int64_t>(s.merge_ids.size());
    }
  }
}

}  // namespace

Plan build_plan(const LoraAttentionParams& p, int64_t num_threads, PlanStorage& s) {
  Plan plan;
  plan.params = &p;
  plan.group_size = p.num_heads / p.num_kv_heads;
  layout_rows(p, plan.group_size, s);
  bool decode = true;
  for (int64_t a = 0; a < p.num_agents; ++a) decode = decode && p.agents[a].num_queries == 1;
  plan.mass_from_raw_scores = p.mass != AttentionMass::kNone && decode;

  const int64_t chunk = choose_chunk(p, num_threads, plan.mass_from_raw_scores, s);
  const int64_t record_floats = make_items(p, chunk, plan.mass_from_raw_scores, s);
  list_merges(p, s);

  s.lse_offset.assign(static_cast<size_t>(p.num_agents), 0);
  int64_t lse_floats = 0;
  for (int64_t a = 0; a < p.num_agents; ++a) {
    s.lse_offset[static_cast<size_t>(a)] = lse_floats;
    lse_floats += s.agent_rows[static_cast<size_t>(a)].num_rows * p.num_kv_heads;
  }
  const int64_t max_rows = *std::max_element(s.base_rows.begin(), s.base_rows.end());
  s.scratch_floats = round_up(scratch_floats_needed(p.head_dim, max_rows), 16);
  s.num_threads = std::max<int64_t>(num_threads, 1);
  const int64_t need = 16 + record_floats + round_up(lse_floats, 16) + s.num_threads * s.scratch_floats;
  if (static_cast<int64_t>(s.floats.size()) < need) s.floats.resize(static_cast<size_t>(need));
  float* aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(s.floats.data()) + 63) & ~uintptr_t{63});
  for (size_t i = 0; i < s.items.size(); ++i) {
    WorkItem& w = s.items[i];
    w.partial = aligned + s.partial_offsets[i];
    w.raw_scores = s.raw_offsets[i] >= 0 ? aligned + s.raw_offsets[i] : nullptr;
    w.cost = item_cost(p, s, w);
  }
  s.lse_rows = aligned + record_floats;
  s.scratch = s.lse_rows + round_up(lse_floats, 16);

  s.order.resize(s.items.size());
  std::iota(s.order.begin(), s.order.end(), 0);
  std::stable_sort(s.order.begin(), s.order.end(),
                   [&](int32_t x, int32_t y) { return s.items[static_cast<size_t>(x)].cost > s.items[static_cast<size_t>(y)].cost; });
  s.mass_bytes.assign(s.items.size(), 0);

  plan.agent_rows = s.agent_rows.data();
  plan.base_of_agent = s.base_of_agent.data();
  plan.items = s.items.data();
  plan.num_items = static_cast<int64_t>(s.items.size());
  plan.merge_begin = s.merge_begin.data();
  plan.merge_ids = s.merge_ids.data();
  plan.lse_rows = s.lse_rows;
  plan.lse_offset = s.lse_offset.data();
  plan.scratch_floats = s.scratch_floats;
  plan.max_item_rows = max_rows;
  return plan;
}

namespace {

// Everything build_plan reads of a call besides pointers, in a fixed order.
void plan_shape(const LoraAttentionParams& p, int64_t num_threads, std::vector<int64_t>& out) {
  out.clear();
  out.insert(out.end(), {num_threads, p.num_heads, p.num_kv_heads, p.head_dim, p.num_bases, p.num_agents,
                         static_cast<int64_t>(p.mass)});
  for (int64_t b = 0; b < p.num_bases; ++b) {
    out.push_back(p.bases[b].num_agents);
    for (int64_t h = 0; h < p.num_kv_heads; ++h) out.push_back(lane_rows(p.bases[b].rows, h));
  }
  for (int64_t a = 0; a < p.num_agents; ++a) {
    const AgentAttention& ag = p.agents[a];
    out.insert(out.end(), {ag.num_queries, ag.v.rank, ag.k.rank});
    for (int64_t h = 0; h < p.num_kv_heads; ++h) out.push_back(lane_rows(ag.private_rows, h));
  }
}

}  // namespace

bool plan_for_call(const LoraAttentionParams& p, int64_t num_threads, PlanStorage& s, Plan& plan) {
  plan_shape(p, num_threads, s.next_shape);
  const bool reuse = !s.shape.empty() && s.next_shape == s.shape;
  if (reuse) {
    for (WorkItem& w : s.items) w.base_bytes = w.residual_bytes = 0;
    std::fill(s.mass_bytes.begin(), s.mass_bytes.end(), 0);
    ++s.reused;
  } else {
    s.plan = build_plan(p, num_threads, s);
    s.shape.swap(s.next_shape);
    ++s.built;
  }
  plan = s.plan;
  plan.params = &p;
  return reuse;
}

float* thread_scratch(PlanStorage& s, int64_t t) { return s.scratch + t * s.scratch_floats; }
const int32_t* item_order(const PlanStorage& s) { return s.order.data(); }
int64_t* mass_bytes(PlanStorage& s) { return s.mass_bytes.data(); }

}  // namespace lorakv::kernels::cpu
