// runtime/eviction_scores.cpp: leverage and capkv scores from the cached rows.
#include "lorakv/runtime/eviction_scores.h"

#include <algorithm>

#include "lorakv/common/errors.h"
#include "lorakv/kernels/rope.h"

namespace lorakv::runtime {

at::Tensor unrotated(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& cos_half,
                     const at::Tensor& sin_half) {
  LORAKV_CHECK(x.dim() == 3 && positions.dim() == 1 && positions.size(0) == x.size(0), InvalidArgumentError,
               "unrotated: x [N, heads, D] and positions [N], got " << x.sizes() << " and " << positions.sizes());
  const at::Tensor cos = cos_half.index_select(0, positions);  // float32 [N, D/2]
  const at::Tensor sin = sin_half.index_select(0, positions);
  // Rotating by -theta undoes the rotation by theta: cos(-theta) = cos, sin(-theta) = -sin.
  return kernels::apply_rope(x.to(at::kFloat).contiguous(), at::cat({cos, cos}, 1), at::cat({-sin, -sin}, 1));
}

at::Tensor unrotated_keys(const at::Tensor& keys, const at::Tensor& positions, const at::Tensor& cos_half,
                          const at::Tensor& sin_half) {
  LORAKV_CHECK(keys.dim() == 3, InvalidArgumentError, "unrotated_keys: keys [heads, N, D], got " << keys.sizes());
  return unrotated(keys.transpose(0, 1), positions, cos_half, sin_half).transpose(0, 1).contiguous();
}

at::Tensor key_leverage(const at::Tensor& keys, int64_t rank) {
  LORAKV_CHECK(keys.dim() == 3 && keys.scalar_type() == at::kFloat, InvalidArgumentError,
               "key_leverage: keys float32 [heads, N, D], got " << keys.sizes() << " " << keys.scalar_type());
  const int64_t d = keys.size(2);
  const int64_t r = std::min(rank, d);
  // float64 for the eigenvectors: a second moment over thousands of keys spans many orders.
  const at::Tensor k = keys.to(at::kDouble);                           // [heads, N, D]
  const at::Tensor moment = at::matmul(k.transpose(1, 2), k);          // [heads, D, D]
  const at::Tensor top = std::get<1>(at::linalg_eigh(moment)).narrow(2, d - r, r);  // [heads, D, r], ascending order
  const at::Tensor projected = at::matmul(k, top).pow(2).sum(2);       // [heads, N]
  const at::Tensor norm = k.pow(2).sum(2);                             // [heads, N]
  const at::Tensor share = at::where(norm > 0, projected / norm.clamp_min(1e-300), at::zeros_like(norm));
  return share.sum(0).to(at::kFloat);
}

at::Tensor capkv_anchor(const at::Tensor& query_mean, int64_t q_len, int64_t future, const at::Tensor& cos_half,
                        const at::Tensor& sin_half) {
  LORAKV_CHECK(query_mean.dim() == 2 && q_len >= 0 && future >= 1 && cos_half.size(0) >= q_len + future,
               InvalidArgumentError,
               "capkv_anchor: query_mean [heads, D], rope tables of " << cos_half.size(0) << " rows for positions up to "
                                                                      << q_len + future);
  // R_avg is cos_p I + sin_p rotate_half averaged over p: both terms are diagonal in the
  // (i, i + D/2) pairs, so it is one RoPE rotation with the averaged tables.
  const at::Tensor cos = cos_half.narrow(0, q_len, future).mean(0, /*keepdim=*/true);  // float32 [1, D/2]
  const at::Tensor sin = sin_half.narrow(0, q_len, future).mean(0, /*keepdim=*/true);
  const at::Tensor q = query_mean.to(at::kFloat).unsqueeze(0).contiguous();  // [1, heads, D]
  return kernels::apply_rope(q, at::cat({cos, cos}, 1), at::cat({sin, sin}, 1)).squeeze(0);
}

at::Tensor capkv_scores(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& anchor, double tau,
                        double eps) {
  LORAKV_CHECK(keys.dim() == 3 && values.sizes() == keys.sizes() && anchor.dim() == 2 &&
                   anchor.size(1) == keys.size(2) && keys.size(0) > 0 && anchor.size(0) % keys.size(0) == 0,
               InvalidArgumentError,
               "capkv_scores: keys and values [kv_heads, N, D], anchor [kv_heads * group, D], got "
                   << keys.sizes() << ", " << values.sizes() << ", " << anchor.sizes());
  const int64_t kv_heads = keys.size(0), n = keys.size(1), d = keys.size(2);
  const int64_t group = anchor.size(0) / kv_heads;
  // Each query head sees its KV head's rows (repeat_kv's order: query head h, KV head h / group).
  const at::Tensor k = keys.to(at::kFloat).repeat_interleave(group, 0);    // [heads, N, D]
  const at::Tensor v = values.to(at::kFloat).repeat_interleave(group, 0);  // [heads, N, D]
  const at::Tensor mu = anchor.to(at::kFloat);                            // [heads, D]
  const at::Tensor k_unit = k / k.pow(2).sum(2, true).sqrt().clamp_min(1e-12);     // F.normalize's floor
  const at::Tensor mu_unit = mu / mu.pow(2).sum(1, true).sqrt().clamp_min(1e-12);
  const at::Tensor cosine = at::matmul(k_unit, mu_unit.unsqueeze(2)).squeeze(2).clamp(-1, 1);  // [heads, N]
  const at::Tensor logits = cosine * tau;
  const at::Tensor w = (logits - logits.amax({1}, true)).exp();            // [heads, N], max 1
  const at::Tensor scaled = v * (w + eps).sqrt().unsqueeze(2);            // [heads, N, D]
  const at::Tensor a = at::eye(d, at::kFloat).unsqueeze(0) + at::matmul(scaled.transpose(1, 2), scaled);  // [heads, D, D]
  const at::Tensor v_t = v.transpose(1, 2);                                // [heads, D, N]
  const at::Tensor leverage = (v_t * at::linalg_solve(a, v_t)).sum(1);     // [heads, N]: v_i^T A^-1 v_i
  return (w * leverage).view({kv_heads, group, n}).mean(1);
}

}  // namespace lorakv::runtime
