// tests/kernels/lora_attention_case.cpp: random cases laid out as cache/ stores them.
#include "tests/kernels/lora_attention_case.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

namespace lorakv::testing {

namespace k = kernels;

namespace {

at::ScalarType scalar_type(k::ElementType t) {
  switch (t) {
    case k::ElementType::kFloat32: return at::kFloat;
    case k::ElementType::kBFloat16: return at::kBFloat16;
    case k::ElementType::kInt8: return at::kChar;
  }
  return at::kFloat;
}

// Residual and key-delta rows, queries and outputs: int8 is for base rows only, so a case
// with an int8 base keeps those in float32.
k::ElementType non_base(k::ElementType t) { return t == k::ElementType::kInt8 ? k::ElementType::kFloat32 : t; }

// Values as the kernel will read them: rounded to `t`, kept as float32.
at::Tensor rounded(const at::Tensor& x, k::ElementType t) {
  return x.to(scalar_type(non_base(t))).to(at::kFloat);
}

// Base rows [N, hpl, D] as int8 with a float32 scale per row and head (max |x| / 127), and
// the float32 values the kernel reads back (int8 times scale, one float32 product each).
// The orthonormal Walsh-Hadamard matrix of size n (a power of two), double.
at::Tensor hadamard_matrix(int64_t n) {
  at::Tensor h = at::ones({1, 1}, at::kDouble);
  while (h.size(0) < n) h = at::cat({at::cat({h, h}, 1), at::cat({h, -h}, 1)}, 0);
  return h / std::sqrt(static_cast<double>(n));
}

// With `hadamard`, the pool holds H x quantised and the reference gets H (int8 times scale),
// the values in their own frame (in double, then float32).
LaneData::Int8 int8_rows(const at::Tensor& x, bool hadamard) {
  const int64_t d = x.size(-1);
  const at::Tensor stored = hadamard ? at::matmul(x.to(at::kDouble), hadamard_matrix(d)).to(at::kFloat) : x;
  const at::Tensor scale = (stored.abs().amax(-1) / 127.0).clamp_min(1e-30);
  const at::Tensor q = (stored / scale.unsqueeze(-1)).round().clamp(-127, 127).to(at::kChar);
  const at::Tensor read = q.to(at::kFloat) * scale.unsqueeze(-1);
  return {q, scale, hadamard ? at::matmul(read.to(at::kDouble), hadamard_matrix(d)).to(at::kFloat) : read};
}

int64_t blocks_for(int64_t rows, int64_t block_size) { return (rows + block_size - 1) / block_size; }

}  // namespace

std::string CaseSpec::describe() const {
  std::ostringstream os;
  os << "seed " << seed << ", heads " << heads << "/" << kv_heads << ", dim " << dim << ", storage "
     << k::element_type_name(storage) << ", q " << k::element_type_name(q_dtype) << ", out "
     << k::element_type_name(out_dtype) << ", block " << block_size << ", context " << context << ", bases "
     << num_bases << ", heads/lane " << heads_per_lane << (per_head_residual ? ", per-head C" : "")
     << (residuals_in_one_pool ? ", C streams in one pool" : "")
     << (evicted ? ", evicted" : "") << (shuffled ? ", shuffled" : "") << (keys_before_rope ? ", pre-RoPE keys" : "")
     << (compact_rope ? ", compact RoPE" : "") << (rope_from_row ? " by row" : "") << (hadamard ? ", Hadamard" : "") << (random_query_positions ? ", random query positions" : "")
     << ", window " << window << ", mass " << static_cast<int>(mass) << ", agents [";
  for (const AgentSpec& a : agents) {
    os << " {q " << a.num_queries << " v" << a.v_rank << " k" << a.k_rank << (a.k_as_delta ? "(delta)" : "") << " priv " << a.private_rows << " base "
       << a.base << (a.shares_a_with >= 0 ? " sharesA " + std::to_string(a.shares_a_with) : "") << "}";
  }
  return os.str() + " ]";
}

LoraAttentionCase::LoraAttentionCase(CaseSpec spec) : spec_(std::move(spec)) {
  at::manual_seed(spec_.seed);
  hpl_ = spec_.heads_per_lane > 0 ? spec_.heads_per_lane : spec_.kv_heads;
  int64_t most_private = 0;
  for (const AgentSpec& a : spec_.agents) most_private = std::max(most_private, a.private_rows);
  rope_rows_ = spec_.context + most_private + 8;
  const at::Tensor inv_freq =
      1.0 / at::pow(10000.0, at::arange(0, spec_.dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(spec_.dim));
  const at::Tensor angles = at::arange(rope_rows_, at::kLong).to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  rope_cos_ = angles.cos().contiguous();
  rope_sin_ = angles.sin().contiguous();

  const auto num_agents = static_cast<int64_t>(spec_.agents.size());
  for (int64_t a = 1; a < num_agents; ++a) {
    TORCH_CHECK(spec_.agents[a].base >= spec_.agents[a - 1].base, "agents must be listed base by base");
  }
  // Rows first (their counts size the pools), then storage.
  for (int64_t b = 0; b < spec_.num_bases; ++b) shared_data_.push_back(draw_rows(0, spec_.context, 5));
  for (int64_t a = 0; a < num_agents; ++a) {
    private_data_.push_back(draw_rows(spec_.context, spec_.agents[a].private_rows, spec_.context + 5));
  }
  for (int64_t b = 0; b < spec_.num_bases; ++b) {
    std::vector<int64_t> shared_counts;
    int64_t blocks = 3;  // a few blocks nobody uses
    for (const LaneData& d : shared_data_[b]) {
      shared_counts.push_back(d.positions.size(0));
      blocks += blocks_for(d.positions.size(0), spec_.block_size);
    }
    for (int64_t a = 0; a < num_agents; ++a) {
      if (spec_.agents[a].base != b) continue;
      for (const LaneData& d : private_data_[a]) blocks += blocks_for(d.positions.size(0), spec_.block_size);
    }
    Pool& pool = new_pool(true, blocks, spec_.block_size, {hpl_, spec_.dim});
    base_pool_.push_back(&pool);
    shared_lanes_.push_back(&place(pool, shared_counts));
    write_base(pool, *shared_lanes_.back(), shared_data_[b]);
  }
  v_res_.resize(static_cast<size_t>(num_agents));
  k_res_.resize(static_cast<size_t>(num_agents));
  b_v_.resize(static_cast<size_t>(num_agents));
  b_k_.resize(static_cast<size_t>(num_agents));
  k_delta_.resize(static_cast<size_t>(num_agents));
  for (int64_t a = 0; a < num_agents; ++a) build_agent(a);
  make_outputs();
}

LoraAttentionCase::Pool& LoraAttentionCase::new_pool(bool base, int64_t blocks, int64_t block_size,
                                                     std::vector<int64_t> row_shape) {
  Pool& p = pools_.emplace_back();
  std::vector<int64_t> shape{blocks, block_size};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  const k::ElementType dtype = base ? spec_.storage : non_base(spec_.storage);
  const auto opts = at::TensorOptions().dtype(scalar_type(dtype));
  // NaN everywhere no row was written: a read of a wrong slot poisons the result (int8
  // pools: their scales are NaN).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  p.k = dtype == k::ElementType::kInt8 ? at::zeros(shape, opts) : at::full(shape, nan, opts);
  const int64_t row = std::accumulate(row_shape.begin(), row_shape.end(), int64_t{1}, std::multiplies<>());
  p.view.k = p.k.data_ptr();
  p.view.dtype = dtype;
  p.view.num_blocks = blocks;
  p.view.block_size = block_size;
  p.view.block_stride = block_size * row;
  p.view.row_stride = row;
  if (base) {
    p.v = at::zeros_like(p.k).fill_(dtype == k::ElementType::kInt8 ? 0.f : nan);
    if (dtype == k::ElementType::kInt8) {
      p.k_scales = at::full({blocks, block_size, row_shape.front()}, nan);
      p.v_scales = at::full({blocks, block_size, row_shape.front()}, nan);
      p.view.k_scales = p.k_scales.data_ptr<float>();
      p.view.v_scales = p.v_scales.data_ptr<float>();
      p.view.scale_row_stride = row_shape.front();
      p.view.hadamard = spec_.hadamard;
    }
    p.positions = at::full({blocks, block_size}, -1000, at::kInt);
    p.view.v = p.v.data_ptr();
    p.view.positions = p.positions.data_ptr<int32_t>();
    p.view.head_stride = spec_.dim;
    p.view.keys_before_rope = spec_.keys_before_rope;
    if (spec_.compact_rope && !spec_.rope_from_row) {
      p.rope_positions = at::full({blocks, block_size}, -1000, at::kInt);
      p.view.rope_positions = p.rope_positions.data_ptr<int32_t>();
    }
  } else {
    p.view.head_stride = spec_.per_head_residual ? row_shape.back() : 0;
  }
  const at::Tensor order = at::randperm(blocks, at::kInt);
  p.order.assign(order.data_ptr<int32_t>(), order.data_ptr<int32_t>() + blocks);
  return p;
}

std::vector<k::LaneRows>& LoraAttentionCase::place(Pool& pool, const std::vector<int64_t>& rows_per_lane) {
  std::vector<k::LaneRows>& result = lane_sets_.emplace_back();
  for (int64_t rows : rows_per_lane) {
    std::vector<int32_t>& table = tables_.emplace_back();
    for (int64_t i = 0; i < blocks_for(rows, pool.view.block_size); ++i) table.push_back(pool.order.at(pool.next++));
    result.push_back({table.data(), rows});
  }
  return result;
}

std::vector<LaneData> LoraAttentionCase::draw_rows(int64_t first_position, int64_t count, int64_t rope_offset) {
  std::mt19937_64 rng(spec_.seed * 7919 + static_cast<uint64_t>(first_position) * 31 + static_cast<uint64_t>(count));
  std::vector<LaneData> result;
  for (int64_t l = 0; l < lanes(); ++l) {
    std::vector<int64_t> kept;
    for (int64_t p = first_position; p < first_position + count; ++p) {
      if (!spec_.evicted || rng() % 10 < 7) kept.push_back(p);
    }
    if (kept.empty() && count > 0) kept.push_back(first_position + count - 1);
    std::vector<int64_t> rope(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) rope[i] = spec_.compact_rope ? rope_offset + static_cast<int64_t>(i) : kept[i];
    std::vector<size_t> order(kept.size());
    std::iota(order.begin(), order.end(), size_t{0});
    if (spec_.shuffled) std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> pos, rpos;
    for (size_t i : order) {
      pos.push_back(kept[i]);
      rpos.push_back(rope[i]);
    }
    const auto n = static_cast<int64_t>(pos.size());
    LaneData d;
    if (spec_.storage == k::ElementType::kInt8) {
      d.k_int8 = int8_rows(at::randn({n, hpl_, spec_.dim}), spec_.hadamard);
      d.v_int8 = int8_rows(at::randn({n, hpl_, spec_.dim}), spec_.hadamard);
      d.k = d.k_int8.values;
      d.v = d.v_int8.values;
    } else {
      d.k = rounded(at::randn({n, hpl_, spec_.dim}), spec_.storage);
      d.v = rounded(at::randn({n, hpl_, spec_.dim}), spec_.storage);
    }
    d.positions = at::tensor(pos, at::kLong);
    d.rope_positions = at::tensor(rpos, at::kLong);
    result.push_back(d);
  }
  return result;
}

void LoraAttentionCase::write_base(Pool& pool, std::vector<k::LaneRows>& lanes, const std::vector<LaneData>& data) {
  const int64_t bs = pool.view.block_size;
  for (size_t l = 0; l < lanes.size(); ++l) {
    k::LaneRows& lane = lanes[l];
    // The metadata the kernel checks its RoPE table against (it reads no row to check).
    if (lane.num_rows > 0) lane.max_rope_position = data[l].rope_positions.max().item<int64_t>();
    if (spec_.rope_from_row && lane.num_rows > 0) {  // compact positions are the row index plus the first one
      const int64_t first = data[l].rope_positions[0].item<int64_t>();
      TORCH_CHECK(at::equal(data[l].rope_positions, at::arange(first, first + lane.num_rows, at::kLong)),
                  "rope_from_row needs rows in order (not shuffled) with compact positions");
      lane.rope_from_row = first;
    }
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < lane.num_rows; ++i) slots.push_back(lane.blocks[i / bs] * bs + i % bs);
    const at::Tensor s = at::tensor(slots, at::kLong);
    if (pool.k_scales.defined()) {
      pool.k.view({-1, hpl_, spec_.dim}).index_put_({s}, data[l].k_int8.q);
      pool.v.view({-1, hpl_, spec_.dim}).index_put_({s}, data[l].v_int8.q);
      pool.k_scales.view({-1, hpl_}).index_put_({s}, data[l].k_int8.scale);
      pool.v_scales.view({-1, hpl_}).index_put_({s}, data[l].v_int8.scale);
    } else {
      pool.k.view({-1, hpl_, spec_.dim}).index_put_({s}, data[l].k.to(pool.k.scalar_type()));
      pool.v.view({-1, hpl_, spec_.dim}).index_put_({s}, data[l].v.to(pool.v.scalar_type()));
    }
    pool.positions.view({-1}).index_put_({s}, data[l].positions.to(at::kInt));
    if (pool.rope_positions.defined()) pool.rope_positions.view({-1}).index_put_({s}, data[l].rope_positions.to(at::kInt));
  }
}

LoraAttentionCase::Residual LoraAttentionCase::draw_residual(int64_t base, int64_t rank) {
  const int64_t bs = spec_.residual_block_size > 0 ? spec_.residual_block_size : spec_.block_size;
  std::vector<int64_t> counts;
  int64_t blocks = 2;
  for (const LaneData& d : shared_data_[base]) {
    counts.push_back(d.positions.size(0));
    blocks += blocks_for(d.positions.size(0), bs);
  }
  std::vector<int64_t> row = spec_.per_head_residual ? std::vector<int64_t>{hpl_, rank} : std::vector<int64_t>{rank};
  Residual r;
  if (spec_.residuals_in_one_pool) {  // one pool per rank, blocks for every agent's stream
    Pool*& pool = residual_pools_[rank];
    if (!pool) pool = &new_pool(false, blocks * static_cast<int64_t>(spec_.agents.size()), bs, row);
    r.pool = pool;
  } else {
    r.pool = &new_pool(false, blocks, bs, row);
  }
  r.lanes = &place(*r.pool, counts);
  for (size_t l = 0; l < counts.size(); ++l) {
    std::vector<int64_t> shape{counts[l]};
    shape.insert(shape.end(), row.begin(), row.end());
    at::Tensor c = rounded(at::randn(shape), spec_.storage);
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < counts[l]; ++i) slots.push_back((*r.lanes)[l].blocks[i / bs] * bs + i % bs);
    std::vector<int64_t> flat{-1};
    flat.insert(flat.end(), row.begin(), row.end());
    r.pool->k.view(flat).index_put_({at::tensor(slots, at::kLong)}, c.to(r.pool->k.scalar_type()));
    r.c.push_back(c);
  }
  return r;
}

// B^T per KV head, [kv_heads, r, D], scaled so the residual is about as large as the base.
at::Tensor LoraAttentionCase::draw_b(int64_t rank) {
  return (at::randn({spec_.kv_heads, rank, spec_.dim}) * (0.7 / std::sqrt(static_cast<double>(rank)))).contiguous();
}

void LoraAttentionCase::build_agent(int64_t a) {
  const AgentSpec& as = spec_.agents[a];
  k::AgentAttention ag;
  const int64_t end = as.private_rows > 0 ? spec_.context + as.private_rows : spec_.context;
  TORCH_CHECK(as.num_queries <= end || spec_.random_query_positions, "more queries than positions");
  q_.push_back(rounded(at::randn({as.num_queries, spec_.heads, spec_.dim}), spec_.q_dtype).to(scalar_type(spec_.q_dtype)));
  q_positions_.push_back(spec_.random_query_positions ? at::randint(0, std::max<int64_t>(end, 1), {as.num_queries}, at::kLong)
                                                      : at::arange(end - as.num_queries, end, at::kLong));
  ag.num_queries = as.num_queries;
  ag.mass_first_query = as.mass_first_query;
  ag.q = q_.back().data_ptr();
  ag.q_dtype = spec_.q_dtype;
  ag.q_row_stride = spec_.heads * spec_.dim;
  ag.q_head_stride = spec_.dim;
  ag.q_positions = q_positions_.back().data_ptr<int64_t>();
  auto stream = [&](int64_t rank, std::vector<Residual>& res, std::vector<at::Tensor>& bs, k::LowRankStream& s) {
    if (rank == 0) return;
    res[a] = as.shares_a_with >= 0 ? res[as.shares_a_with] : draw_residual(as.base, rank);
    TORCH_CHECK(res[a].pool && res[a].c[0].size(-1) == rank,
                "shares_a_with names an agent without that residual or of another rank");
    bs[a] = draw_b(rank);
    s.rank = rank;
    s.c_storage = &res[a].pool->view;
    s.c_lanes = res[a].lanes->data();
    s.b = bs[a].data_ptr<float>();
    s.b_head_stride = rank * spec_.dim;
    s.b_rank_stride = spec_.dim;
  };
  stream(as.v_rank, v_res_, b_v_, ag.v);
  stream(as.k_rank, k_res_, b_k_, ag.k);
  if (as.k_rank > 0 && as.k_as_delta) {
    store_key_deltas(a, ag.k_delta);
    ag.k = {};
  }
  if (as.private_rows > 0) {
    Pool& pool = *base_pool_[as.base];
    std::vector<int64_t> counts;
    for (const LaneData& d : private_data_[a]) counts.push_back(d.positions.size(0));
    std::vector<k::LaneRows>& lanes = place(pool, counts);
    write_base(pool, lanes, private_data_[a]);
    ag.private_rows = {&pool.view, lanes.data(), hpl_};
  }
  agents_.push_back(ag);
}

// The agent's K-LoRA as stored full-width deltas: C_k B_k per KV head, rotated to each row's
// RoPE position unless the base keys are stored before RoPE, rounded to the storage dtype, in
// a pool of their own with the base pools' row layout [hpl, D].
void LoraAttentionCase::store_key_deltas(int64_t a, k::KeyDelta& view) {
  const AgentSpec& as = spec_.agents[a];
  const std::vector<LaneData>& shared = shared_data_[as.base];
  std::vector<int64_t> counts;
  int64_t blocks = 2;
  for (const LaneData& d : shared) {
    counts.push_back(d.positions.size(0));
    blocks += blocks_for(counts.back(), spec_.block_size);
  }
  Pool& pool = new_pool(false, blocks, spec_.block_size, {hpl_, spec_.dim});
  pool.view.head_stride = spec_.dim;
  std::vector<k::LaneRows>& lanes = place(pool, counts);
  k_delta_[a].clear();
  for (size_t l = 0; l < counts.size(); ++l) {
    std::vector<at::Tensor> heads;
    for (int64_t i = 0; i < hpl_; ++i) {
      const at::Tensor c = spec_.per_head_residual ? k_res_[a].c[l].select(1, i) : k_res_[a].c[l];  // [N, r]
      at::Tensor d = at::matmul(c.to(at::kDouble), b_k_[a][static_cast<int64_t>(l) * hpl_ + i].to(at::kDouble));
      if (!spec_.keys_before_rope && counts[l] > 0) {
        d = reference::rope_rows(d, shared[l].rope_positions, rope_cos_, rope_sin_);
      }
      heads.push_back(d);
    }
    const at::Tensor delta = rounded(at::stack(heads, 1).to(at::kFloat), spec_.storage);  // [N, hpl, D]
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < counts[l]; ++i) slots.push_back(lanes[l].blocks[i / spec_.block_size] * spec_.block_size + i % spec_.block_size);
    pool.k.view({-1, hpl_, spec_.dim}).index_put_({at::tensor(slots, at::kLong)}, delta.to(pool.k.scalar_type()));
    k_delta_[a].push_back(delta);
  }
  view.storage = &pool.view;
  view.lanes = lanes.data();
}

int64_t LoraAttentionCase::shared_rows(int64_t base, int64_t kv_head) const {
  return shared_data_[base][kv_head / hpl_].positions.size(0);
}

int64_t LoraAttentionCase::private_rows(int64_t agent, int64_t kv_head) const {
  return private_data_[agent][kv_head / hpl_].positions.size(0);
}

void LoraAttentionCase::make_outputs() {
  const int64_t num_agents = static_cast<int64_t>(agents_.size());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t b = 0; b < spec_.num_bases; ++b) {
    k::SharedBase base;
    base.rows = {&base_pool_[b]->view, shared_lanes_[b]->data(), hpl_};
    base.first_agent = num_agents;
    for (int64_t a = 0; a < num_agents; ++a) {
      if (spec_.agents[a].base != b) continue;
      base.first_agent = std::min(base.first_agent, a);
      ++base.num_agents;
    }
    int64_t rows = 1;
    for (int64_t h = 0; h < spec_.kv_heads; ++h) rows = std::max(rows, shared_rows(b, h));
    const int64_t copies = spec_.mass == k::AttentionMass::kPerAgent ? std::max<int64_t>(base.num_agents, 1) : 1;
    shared_mass_.push_back(at::full({copies, spec_.kv_heads, rows}, nan));
    if (spec_.mass != k::AttentionMass::kNone) {
      base.mass = shared_mass_.back().data_ptr<float>();
      base.mass_agent_stride = spec_.kv_heads * rows;
      base.mass_head_stride = rows;
    }
    bases_.push_back(base);
  }
  for (int64_t a = 0; a < num_agents; ++a) {
    k::AgentAttention& ag = agents_[a];
    outs_.push_back(at::full({ag.num_queries, spec_.heads, spec_.dim}, nan,
                             at::TensorOptions().dtype(scalar_type(spec_.out_dtype))));
    ag.out = outs_.back().data_ptr();
    ag.out_dtype = spec_.out_dtype;
    ag.out_row_stride = spec_.heads * spec_.dim;
    ag.out_head_stride = spec_.dim;
    lses_.push_back(at::full({ag.num_queries, spec_.heads}, nan));
    ag.lse = lses_.back().data_ptr<float>();
    ag.lse_row_stride = spec_.heads;
    int64_t rows = 1;
    for (int64_t h = 0; h < spec_.kv_heads; ++h) rows = std::max(rows, private_rows(a, h));
    private_mass_.push_back(at::full({spec_.kv_heads, rows}, nan));
    if (spec_.mass != k::AttentionMass::kNone) {
      ag.private_mass = private_mass_.back().data_ptr<float>();
      ag.private_mass_head_stride = rows;
    }
  }
}

k::LoraAttentionParams LoraAttentionCase::params() const {
  k::LoraAttentionParams p;
  p.num_heads = spec_.heads;
  p.num_kv_heads = spec_.kv_heads;
  p.head_dim = spec_.dim;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec_.dim)));
  p.window = spec_.window;
  p.rope_cos = rope_cos_.data_ptr<float>();
  p.rope_sin = rope_sin_.data_ptr<float>();
  p.rope_rows = rope_rows_;
  p.bases = bases_.data();
  p.num_bases = static_cast<int64_t>(bases_.size());
  p.agents = agents_.data();
  p.num_agents = static_cast<int64_t>(agents_.size());
  p.mass = spec_.mass;
  return p;
}

void LoraAttentionCase::reset_outputs() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::vector<at::Tensor>* ts : {&outs_, &lses_, &shared_mass_, &private_mass_}) {
    for (at::Tensor& t : *ts) t.fill_(nan);
  }
}

void LoraAttentionCase::run(std::optional<cpu::VectorPath> path, int64_t threads, k::LoraAttentionStats* stats,
                            k::LoraAttentionPlan* plan, std::optional<bool> integer_qk) {
  reset_outputs();
  k::LoraAttentionStats own;
  k::LoraAttentionParams p = params();
  p.vector_path = path;
  p.num_threads = threads;
  p.stats = stats ? stats : &own;
  p.plan = plan;
  p.integer_qk = integer_qk;
  k::lora_attention(p);
  const bool rounded = p.stats->integer_qk && spec_.storage == k::ElementType::kInt8 && !spec_.keys_before_rope;
  if (rounded != queries_rounded_) reference_.clear();
  queries_rounded_ = rounded;
}

namespace {

// The queries integer QK reads, as the reference takes them (before the softmax scale):
// q times the scale in float32, into the Hadamard frame where the rows are stored there,
// rounded per row and head to steps of its largest magnitude / 32767 (half to even), back.
at::Tensor int16_rounded_queries(const at::Tensor& q, float scale, bool hadamard) {
  const int64_t d = q.size(-1);
  at::Tensor x = q.to(at::kFloat) * scale;
  if (hadamard) x = at::matmul(x.to(at::kDouble), hadamard_matrix(d)).to(at::kFloat);
  const at::Tensor largest = x.abs().amax(-1, true);
  const at::Tensor inv = at::where(largest > 0, 32767.f / largest, at::zeros_like(largest));
  at::Tensor rounded = ((x * inv).round() * (largest / 32767.f)).to(at::kDouble);
  if (hadamard) rounded = at::matmul(rounded, hadamard_matrix(d));
  return rounded / static_cast<double>(scale);
}

}  // namespace

reference::LoraRefAgent LoraAttentionCase::reference_input(int64_t a) const {
  const AgentSpec& as = spec_.agents[a];
  reference::LoraRefAgent r;
  r.q = queries_rounded_ ? int16_rounded_queries(q_[a], params().scale, spec_.hadamard) : q_[a].to(at::kFloat);
  r.q_positions = q_positions_[a];
  r.mass_first_query = as.mass_first_query;
  auto rows_of = [&](const LaneData& d, int64_t head_in_lane) {
    reference::LoraRefRows rows;
    rows.k = d.k.select(1, head_in_lane);
    rows.v = d.v.select(1, head_in_lane);
    rows.positions = d.positions;
    rows.rope_positions = d.rope_positions;
    rows.keys_before_rope = spec_.keys_before_rope;
    return rows;
  };
  auto c_of = [&](const Residual& res, int64_t lane, int64_t head_in_lane) {
    return spec_.per_head_residual ? res.c[lane].select(1, head_in_lane) : res.c[lane];
  };
  for (int64_t h = 0; h < spec_.kv_heads; ++h) {
    const int64_t lane = h / hpl_, hil = h % hpl_;
    reference::LoraRefRows shared = rows_of(shared_data_[as.base][lane], hil);
    if (as.v_rank > 0) {
      shared.c_v = c_of(v_res_[a], lane, hil);
      shared.b_v = b_v_[a][h];
    }
    if (as.k_rank > 0 && as.k_as_delta) {
      shared.k_delta = k_delta_[a][lane].select(1, hil);
    } else if (as.k_rank > 0) {
      shared.c_k = c_of(k_res_[a], lane, hil);
      shared.b_k = b_k_[a][h];
    }
    r.shared.push_back(shared);
    r.private_rows.push_back(rows_of(private_data_[a][lane], hil));
  }
  return r;
}

reference::LoraRefResult LoraAttentionCase::reference(int64_t a) const {
  reference_.resize(agents_.size());
  if (!reference_[a]) {
    reference_[a] = reference::lora_attention_reference(
        reference_input(a), spec_.kv_heads, 1.0 / std::sqrt(static_cast<double>(spec_.dim)), spec_.window, rope_cos_, rope_sin_);
  }
  return *reference_[a];
}

// Tolerances, as |kernel - reference| <= tol * (1 + |reference|):
//  - The reference computes in double from the very values the kernel reads (inputs are
//    rounded to the storage and query dtypes before either sees them), so what remains is
//    the kernel's float32 arithmetic: dot products of head_dim terms, softmax sums and P.V
//    over up to ~10^3 rows, the online rescaling, and a polynomial exp (2e-7 relative).
//    Each float32 sum of N terms is off by at most ~N * 2^-24 of its magnitude (~6e-5 for
//    N = 1000, typically sqrt(N) * 2^-24 ~ 2e-6): tol 5e-5 for out, lse and mass, whatever
//    the storage dtype (bfloat16 storage changes the inputs, not the arithmetic).
//  - A bfloat16 output adds one rounding to 8 significant bits: at most 2^-9 ~ 2e-3
//    relative, so out gets 4e-3 there; lse and mass stay float32.
//  - Integer QK (int8 rows, keys after RoPE, a VNNI path) reads the queries rounded to int16
//    steps (LoraAttentionParams::integer_qk); the reference reads them so rounded too
//    (LoraAttentionCase::queries_rounded), so the integer sums, exact in int32, leave only
//    the float32 arithmetic above.
Tolerance tolerance_for(const CaseSpec& spec) {
  Tolerance t{5e-5, 5e-5, 5e-5};
  if (spec.out_dtype == k::ElementType::kBFloat16) t.out = 4e-3;
  return t;
}

namespace {

// "" or a description of the largest violation of |x - ref| <= tol (1 + |ref|), -inf
// matching -inf exactly and NaN (an unwritten output) always failing.
std::string check_close(const std::string& what, const at::Tensor& got, const at::Tensor& want, double tol) {
  const at::Tensor x = got.to(at::kDouble), r = want.to(at::kDouble);
  if (x.sizes() != r.sizes()) return what + ": shape differs\n";
  const at::Tensor both_neg_inf = x.isneginf().logical_and(r.isneginf());
  const at::Tensor excess = ((x - r).abs() - tol * (1 + r.abs())).masked_fill(both_neg_inf, 0).nan_to_num(1e30, 1e30, 1e30);
  if (excess.numel() == 0 || excess.max().item<double>() <= 0) return "";
  const int64_t i = excess.view(-1).argmax().item<int64_t>();
  std::ostringstream os;
  os << what << ": element " << i << " is " << x.view(-1)[i].item<double>() << ", reference "
     << r.view(-1)[i].item<double>() << " (tolerance " << tol << " x (1 + |ref|))\n";
  return os.str();
}

}  // namespace

std::string compare_with_reference(const LoraAttentionCase& c, const Tolerance& tol) {
  const CaseSpec& s = c.spec();
  std::string errors;
  std::vector<std::vector<at::Tensor>> mass_sum(static_cast<size_t>(s.num_bases));  // per base, per KV head
  for (int64_t a = 0; a < static_cast<int64_t>(s.agents.size()); ++a) {
    const reference::LoraRefResult ref = c.reference(a);
    const std::string who = "agent " + std::to_string(a);
    errors += check_close(who + " out", c.out(a), ref.out, tol.out);
    errors += check_close(who + " lse", c.lse(a), ref.lse, tol.lse);
    if (s.mass == k::AttentionMass::kNone) continue;
    const int64_t b = s.agents[a].base;
    const int64_t index = a - c.params().bases[b].first_agent;
    for (int64_t h = 0; h < s.kv_heads; ++h) {
      const int64_t np = c.private_rows(a, h), ns = c.shared_rows(b, h);
      errors += check_close(who + " private mass head " + std::to_string(h), c.private_mass(a)[h].narrow(0, 0, np),
                            ref.private_mass[h], tol.mass);
      if (s.mass == k::AttentionMass::kPerAgent) {
        errors += check_close(who + " shared mass head " + std::to_string(h),
                              c.shared_mass(b)[index][h].narrow(0, 0, ns), ref.shared_mass[h], tol.mass);
      } else if (mass_sum[b].size() <= static_cast<size_t>(h)) {
        mass_sum[b].push_back(ref.shared_mass[h]);
      } else {
        mass_sum[b][h] = mass_sum[b][h] + ref.shared_mass[h];
      }
    }
  }
  for (int64_t b = 0; b < s.num_bases; ++b) {
    for (size_t h = 0; h < mass_sum[b].size(); ++h) {
      const int64_t ns = c.shared_rows(b, static_cast<int64_t>(h));
      errors += check_close("base " + std::to_string(b) + " summed mass head " + std::to_string(h),
                            c.shared_mass(b)[0][static_cast<int64_t>(h)].narrow(0, 0, ns), mass_sum[b][h], tol.mass);
    }
  }
  return errors;
}

std::vector<cpu::VectorPath> runnable_paths() { return cpu::supported_vector_paths(cpu::detected_cpu_features()); }

std::string KernelForm::name() const {
  return std::string(cpu::vector_path_name(path)) + (integer_qk ? " (integer QK)" : "");
}

std::vector<KernelForm> runnable_forms() {
  std::vector<KernelForm> forms;
  for (cpu::VectorPath path : runnable_paths()) {
    forms.push_back({path, false});
    if (cpu::has_vnni(cpu::detected_cpu_features(), path)) forms.push_back({path, true});
  }
  return forms;
}

}  // namespace lorakv::testing
