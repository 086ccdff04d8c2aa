// runtime/eviction_scores.cpp: leverage scores from the cached keys.
#include "lorakv/runtime/eviction_scores.h"

#include <algorithm>

#include "lorakv/common/errors.h"
#include "lorakv/kernels/rope.h"

namespace lorakv::runtime {

at::Tensor unrotated_keys(const at::Tensor& keys, const at::Tensor& positions, const at::Tensor& cos_half,
                          const at::Tensor& sin_half) {
  LORAKV_CHECK(keys.dim() == 3 && positions.dim() == 1 && positions.size(0) == keys.size(1), InvalidArgumentError,
               "unrotated_keys: keys [heads, N, D] and positions [N], got " << keys.sizes() << " and " << positions.sizes());
  const at::Tensor cos = cos_half.index_select(0, positions);  // [N, D/2]
  const at::Tensor sin = sin_half.index_select(0, positions);
  // Rotating by -theta undoes the rotation by theta: cos(-theta) = cos, sin(-theta) = -sin.
  const at::Tensor k = keys.to(at::kFloat).transpose(0, 1).contiguous();  // [N, heads, D]
  return kernels::apply_rope(k, at::cat({cos, cos}, 1), at::cat({-sin, -sin}, 1)).transpose(0, 1).contiguous();
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

}  // namespace lorakv::runtime
