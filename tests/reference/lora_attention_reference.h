// tests/reference/lora_attention_reference.h: the fused base + low-rank attention done the
// plain way, in double precision: each agent's keys and values materialised at full width
// (V = V_base + C_v B_v; K = K_base + RoPE(C_k B_k), or RoPE(K_base + C_k B_k) for keys stored
// before RoPE, rotated to each row's own position), then matmul, mask by stored position,
// softmax. kernels/lora_attention is tested against it.
#pragma once

#include <ATen/ATen.h>

#include <limits>
#include <vector>

namespace lorakv::reference {

// One KV head's rows of one kind (shared or private) that an agent reads, dense.
struct LoraRefRows {
  at::Tensor k;               // float [N, D], as stored (before or after RoPE)
  at::Tensor v;               // float [N, D]
  at::Tensor positions;       // int64 [N], stored positions (mask)
  at::Tensor rope_positions;  // int64 [N], the positions keys are rotated to
  bool keys_before_rope = false;
  at::Tensor c_v, b_v;  // [N, r_v] and [r_v, D] (scale folded in), or undefined
  at::Tensor c_k, b_k;  // [N, r_k] and [r_k, D], C_k before RoPE, or undefined
  at::Tensor k_delta;   // [N, D] stored key deltas (after RoPE, or before it with keys_before_rope), or undefined
};

struct LoraRefAgent {
  at::Tensor q;            // float [Tq, H, D], RoPE applied
  at::Tensor q_positions;  // int64 [Tq]
  std::vector<LoraRefRows> shared;   // per KV head (may have 0 rows)
  std::vector<LoraRefRows> private_rows;  // per KV head (may have 0 rows)
  int64_t mass_first_query = 0;  // queries before it add no mass
};

struct LoraRefResult {
  at::Tensor out;  // double [Tq, H, D]; zeros for a query that sees no row
  at::Tensor lse;  // double [Tq, H]; -inf for a query that sees no row
  std::vector<at::Tensor> shared_mass;   // per KV head, double [N]: summed over the group's heads and queries
  std::vector<at::Tensor> private_mass;  // per KV head, double [N_private]
};

// rotate_half RoPE of x [N, D] to `positions` [N] with float tables cos, sin [rows, D/2].
inline at::Tensor rope_rows(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& cos,
                            const at::Tensor& sin) {
  const int64_t half = x.size(1) / 2;
  const at::Tensor c = cos.index_select(0, positions).to(at::kDouble);
  const at::Tensor s = sin.index_select(0, positions).to(at::kDouble);
  const at::Tensor x1 = x.narrow(1, 0, half), x2 = x.narrow(1, half, half);
  return at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 1);
}

// The keys and values the agent reads at full width, double.
inline std::pair<at::Tensor, at::Tensor> effective_rows(const LoraRefRows& r, const at::Tensor& cos,
                                                        const at::Tensor& sin) {
  at::Tensor k = r.k.to(at::kDouble), v = r.v.to(at::kDouble);
  if (r.c_v.defined()) v = v + at::matmul(r.c_v.to(at::kDouble), r.b_v.to(at::kDouble));
  at::Tensor delta = r.c_k.defined() ? at::matmul(r.c_k.to(at::kDouble), r.b_k.to(at::kDouble)) : at::zeros_like(k);
  if (k.size(0) == 0) return {k, v};
  if (r.k_delta.defined()) {
    k = k + r.k_delta.to(at::kDouble);
    return {r.keys_before_rope ? rope_rows(k, r.rope_positions, cos, sin) : k, v};
  }
  if (r.keys_before_rope) {
    k = rope_rows(k + delta, r.rope_positions, cos, sin);
  } else if (r.c_k.defined()) {
    k = k + rope_rows(delta, r.rope_positions, cos, sin);
  }
  return {k, v};
}

// cos, sin: float [rope_rows, D/2] (may be undefined when nothing is rotated).
inline LoraRefResult lora_attention_reference(const LoraRefAgent& agent, int64_t num_kv_heads, double scale,
                                              int64_t window, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t tq = agent.q.size(0), heads = agent.q.size(1), dim = agent.q.size(2);
  const int64_t group = heads / num_kv_heads;
  const double inf = std::numeric_limits<double>::infinity();
  LoraRefResult res;
  res.out = at::zeros({tq, heads, dim}, at::kDouble);
  res.lse = at::full({tq, heads}, -inf, at::kDouble);
  const at::Tensor q = agent.q.to(at::kDouble);
  for (int64_t h = 0; h < num_kv_heads; ++h) {
    auto [ks, vs] = effective_rows(agent.shared[h], cos, sin);
    auto [kp, vp] = effective_rows(agent.private_rows[h], cos, sin);
    const at::Tensor k = at::cat({ks, kp}), v = at::cat({vs, vp});
    const at::Tensor pos = at::cat({agent.shared[h].positions, agent.private_rows[h].positions});
    const int64_t n_shared = ks.size(0), n = k.size(0);
    const at::Tensor qh = q.narrow(1, h * group, group);                      // [Tq, G, D]
    at::Tensor scores = at::einsum("tgd,nd->tgn", {qh, k}) * scale;           // [Tq, G, N]
    const at::Tensor distance = agent.q_positions.unsqueeze(1) - pos.unsqueeze(0);  // [Tq, N]
    at::Tensor allowed = distance >= 0;
    if (window > 0) allowed = allowed.logical_and(distance < window);
    scores = scores.masked_fill(allowed.logical_not().unsqueeze(1), -inf);
    at::Tensor lse = n > 0 ? at::logsumexp(scores, -1) : at::full({tq, group}, -inf, at::kDouble);  // [Tq, G]
    const at::Tensor sees = lse.isfinite();
    at::Tensor p = at::exp(scores - lse.unsqueeze(-1));
    p = at::where(sees.unsqueeze(-1), p, at::zeros_like(p));                  // no NaN rows
    res.out.narrow(1, h * group, group).copy_(at::einsum("tgn,nd->tgd", {p, v}));
    res.lse.narrow(1, h * group, group).copy_(lse);
    const int64_t first = std::min(agent.mass_first_query, tq);
    const at::Tensor mass = p.narrow(0, first, tq - first).sum(at::IntArrayRef{0, 1});  // [N]
    res.shared_mass.push_back(mass.narrow(0, 0, n_shared));
    res.private_mass.push_back(mass.narrow(0, n_shared, n - n_shared));
  }
  return res;
}

}  // namespace lorakv::reference
