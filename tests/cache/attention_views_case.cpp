// tests/cache/attention_views_case.cpp: random rows in a PagedKvCache, attended through the
// views and through the plain reference.
#include "attention_views_case.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "tests/reference/lora_attention_reference.h"

namespace lorakv::cache::test {

namespace {

const AdapterIdentity kAgent{7, 7};

// |kernel - reference| <= kTolerance * (1 + |reference|), as in tests/kernels: the
// reference computes in double from the very values the kernel reads (pool rows in their
// storage dtype, float32 queries and B), so only the kernel's float32 arithmetic remains:
// each float32 sum of N terms is off by at most ~N * 2^-24 of its magnitude. Here N <= 32
// (head_dim 32, < 32 rows per lane); the kernels' bound for N up to 1000 rows, 5e-5, is
// reused so both layers hold the kernel to one standard. bfloat16 storage changes the
// inputs, not the arithmetic, so the tolerance stays.
constexpr double kTolerance = 5e-5;

double attention_scale() { return 1.0 / std::sqrt(static_cast<double>(kViewHeadDim)); }

int64_t rank_at(const PagedKvCache& cache, SeqId seq, const ContentKey& stream, int64_t layer) {
  return cache.manager().residual(seq, stream).ranks.at(static_cast<size_t>(layer));
}

// A KV head's rows with nothing in them: the agents here have no private rows.
reference::LoraRefRows no_rows() {
  reference::LoraRefRows r;
  r.k = at::zeros({0, kViewHeadDim});
  r.v = at::zeros({0, kViewHeadDim});
  r.positions = at::zeros({0}, at::kLong);
  r.rope_positions = r.positions;
  return r;
}

}  // namespace

CacheConfig views_config(int64_t heads_per_group, StorageDtype dtype) {
  CacheConfig c;
  c.layout = {kViewLayers, kViewKvHeads, kViewHeadDim, kViewBlock, heads_per_group};
  c.base_dtype = dtype;
  c.residual_dtype = dtype == StorageDtype::kInt8 ? StorageDtype::kFloat32 : dtype;
  c.num_base_blocks = 64;
  c.residual_pools = {{kViewRank, 64}};
  return c;
}

// Residual rows are float32 beside an int8 base.
ContentKey agent_v_stream(StorageDtype dtype) {
  return ContentKey::residual(StreamKind::kResidualV, dtype == StorageDtype::kInt8 ? StorageDtype::kFloat32 : dtype, kAgent);
}

void append_random(PagedKvCache& cache, SeqId seq, int64_t count, const std::vector<ContentKey>& streams) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), 100 + static_cast<int32_t>(cache.manager().sequence(seq).num_positions));
  AppendRequest request{tokens, kAgent, {}};
  for (const ContentKey& key : streams) request.residuals.push_back({key, count});
  const std::optional<AppendSlots> slots = cache.append(seq, request);
  ASSERT_TRUE(slots.has_value()) << "the test's pools are too small";
  for (int64_t layer = 0; layer < kViewLayers; ++layer) {
    cache.write_base(*slots, layer, at::randn({count, kViewKvHeads, kViewHeadDim}),
                     at::randn({count, kViewKvHeads, kViewHeadDim}));
    for (size_t i = 0; i < streams.size(); ++i) {
      const int64_t rank = rank_at(cache, seq, streams[i], layer);
      if (rank > 0) cache.write_residual(*slots, i, layer, at::randn({count, rank}));
    }
  }
}

ViewAgent random_agent(int64_t num_queries, int64_t last_position, bool adapted, int64_t rank) {
  ViewAgent a;
  a.q = at::randn({num_queries, kViewHeads, kViewHeadDim});
  a.q_positions = at::arange(last_position - num_queries + 1, last_position + 1, at::kLong);
  a.adapted = adapted;
  if (adapted && rank > 0) {
    a.b_v = (at::randn({kViewKvHeads, rank, kViewHeadDim}) * (0.7 / std::sqrt(static_cast<double>(rank)))).contiguous();
  }
  return a;
}

std::vector<at::Tensor> attend_through_views(const PagedKvCache& cache, SeqId seq, int64_t layer,
                                             const ContentKey& stream, const std::vector<ViewAgent>& agents) {
  const BaseLayerView base = BaseLayerView::of(cache, seq, layer);
  const ResidualLayerView residual = ResidualLayerView::of(cache, seq, stream, layer);
  std::vector<at::Tensor> outs;
  std::vector<kernels::AgentAttention> views;
  for (const ViewAgent& agent : agents) {
    kernels::AgentAttention a;
    a.num_queries = agent.q.size(0);
    a.q = agent.q.data_ptr();
    a.q_row_stride = kViewHeads * kViewHeadDim;
    a.q_head_stride = kViewHeadDim;
    a.q_positions = agent.q_positions.data_ptr<int64_t>();
    if (agent.adapted) {
      const float* b = agent.b_v.defined() ? agent.b_v.data_ptr<float>() : nullptr;
      a.v = residual.stream(b, residual.rank() * kViewHeadDim, kViewHeadDim);
    }
    // NaN until written: an output the kernel skips fails the comparison.
    outs.push_back(at::full({a.num_queries, kViewHeads, kViewHeadDim}, std::numeric_limits<float>::quiet_NaN()));
    a.out = outs.back().data_ptr();
    a.out_row_stride = kViewHeads * kViewHeadDim;
    a.out_head_stride = kViewHeadDim;
    views.push_back(a);
  }
  kernels::SharedBase shared;
  shared.rows = base.rows();
  shared.num_agents = static_cast<int64_t>(views.size());
  kernels::LoraAttentionParams p;
  p.num_heads = kViewHeads;
  p.num_kv_heads = kViewKvHeads;
  p.head_dim = kViewHeadDim;
  p.scale = static_cast<float>(attention_scale());
  p.bases = &shared;
  p.num_bases = 1;
  p.agents = views.data();
  p.num_agents = shared.num_agents;
  // The float32 QK form: the views are under test here, against a reference fed the queries
  // as given; integer QK's int16 queries are the kernel tests' (tests/kernels).
  p.integer_qk = false;
  kernels::lora_attention(p);
  return outs;
}

at::Tensor reference_out(const PagedKvCache& cache, SeqId seq, int64_t layer, const ContentKey& stream,
                         const ViewAgent& agent) {
  const int64_t hpg = cache.layout().heads_per_group;
  const bool residual = agent.adapted && rank_at(cache, seq, stream, layer) > 0;
  reference::LoraRefAgent ref;
  ref.q = agent.q;
  ref.q_positions = agent.q_positions;
  for (int64_t h = 0; h < kViewKvHeads; ++h) {
    const GatheredRows lane = cache.gather_lane(seq, layer, h / hpg);  // [hpg, N, D]
    reference::LoraRefRows rows;
    rows.k = lane.k.select(0, h % hpg);
    rows.v = lane.v.select(0, h % hpg);
    rows.positions = lane.positions;
    rows.rope_positions = lane.positions;
    if (residual) {
      rows.c_v = cache.gather_residual(seq, stream, layer, h / hpg).c;  // [N, rank]
      rows.b_v = agent.b_v[h];                                           // [rank, D]
    }
    ref.shared.push_back(rows);
    ref.private_rows.push_back(no_rows());
  }
  return reference::lora_attention_reference(ref, kViewKvHeads, attention_scale(), 0, {}, {}).out;
}

std::string compare_views_with_reference(const PagedKvCache& cache, SeqId seq, int64_t layer,
                                         const ContentKey& stream, const std::vector<ViewAgent>& agents) {
  const std::vector<at::Tensor> outs = attend_through_views(cache, seq, layer, stream, agents);
  std::ostringstream errors;
  for (size_t i = 0; i < agents.size(); ++i) {
    const at::Tensor want = reference_out(cache, seq, layer, stream, agents[i]);
    const at::Tensor excess = ((outs[i].to(at::kDouble) - want).abs() / (1 + want.abs())).nan_to_num(1e30);
    const double worst = excess.max().item<double>();
    if (worst > kTolerance) {
      errors << "seq " << seq.value() << " layer " << layer << " agent " << i << ": relative error " << worst
             << " > " << kTolerance << "\n";
    }
  }
  return errors.str();
}

}  // namespace lorakv::cache::test
