// tests/reference/capkv_reference.h: CapKV's score (docs/eviction.md, `capkv`) written out
// from its formula, one query head and one row at a time, in double precision, with an
// explicit inverse: what runtime::capkv_scores and runtime::capkv_anchor are tested against.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace lorakv::reference {

// R_avg q with R_avg the mean over positions p in [q_len, q_len + future) of the matrices
// cos(p) I + sin(p) J, J the rotate_half matrix (J[i + D/2][i] = 1, J[i][i + D/2] = -1).
// query_mean: float [heads, D]; cos_half, sin_half: float32 [rows, D/2] (entry i of
// position p: cos and sin of the angle of pair (i, i + D/2)). Returns double [heads, D].
inline at::Tensor capkv_anchor(const at::Tensor& query_mean, int64_t q_len, int64_t future, const at::Tensor& cos_half,
                               const at::Tensor& sin_half) {
  const int64_t d = query_mean.size(1), half = d / 2;
  at::Tensor r = at::zeros({d, d}, at::kDouble);
  for (int64_t p = q_len; p < q_len + future; ++p) {
    at::Tensor m = at::zeros({d, d}, at::kDouble);
    for (int64_t i = 0; i < half; ++i) {
      const double c = cos_half[p][i].item<double>(), s = sin_half[p][i].item<double>();
      m[i][i] = c;
      m[i + half][i + half] = c;
      m[i + half][i] = s;   // sin * J, J[i + half][i] = 1
      m[i][i + half] = -s;  // J[i][i + half] = -1
    }
    r += m;
  }
  r /= static_cast<double>(future);
  return at::matmul(query_mean.to(at::kDouble), r.t());
}

// Per KV head g and row i: the mean over query heads h of KV head g (h / group == g) of
// w_hi * v_i^T A_h^-1 v_i, w_hi = exp(tau c_hi - max_j tau c_hj), c_hi = cos(anchor_h, k_i)
// clamped to [-1, 1], A_h = I + sum_j (w_hj + eps) v_j v_j^T.
// keys, values: float [kv_heads, N, D]; anchor: float [heads, D]. Returns double [kv_heads, N].
inline at::Tensor capkv_scores(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& anchor, double tau,
                               double eps = 1e-6) {
  const int64_t kv_heads = keys.size(0), n = keys.size(1), d = keys.size(2), heads = anchor.size(0);
  const int64_t group = heads / kv_heads;
  const at::Tensor k = keys.to(at::kDouble), v = values.to(at::kDouble), mu = anchor.to(at::kDouble);
  at::Tensor out = at::zeros({kv_heads, n}, at::kDouble);
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / group;
    const double mu_norm = std::sqrt(mu[h].pow(2).sum().item<double>());
    std::vector<double> logit(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const double k_norm = std::sqrt(k[g][i].pow(2).sum().item<double>());
      double c = (k[g][i] * mu[h]).sum().item<double>() / (std::max(k_norm, 1e-12) * std::max(mu_norm, 1e-12));
      c = std::min(1.0, std::max(-1.0, c));
      logit[static_cast<size_t>(i)] = tau * c;
    }
    const double top = *std::max_element(logit.begin(), logit.end());
    at::Tensor a = at::eye(d, at::kDouble);
    std::vector<double> w(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      w[static_cast<size_t>(j)] = std::exp(logit[static_cast<size_t>(j)] - top);
      a += (w[static_cast<size_t>(j)] + eps) * at::outer(v[g][j], v[g][j]);
    }
    const at::Tensor a_inv = at::inverse(a);
    for (int64_t i = 0; i < n; ++i) {
      const double leverage = at::dot(v[g][i], at::mv(a_inv, v[g][i])).item<double>();
      out[g][i].add_(w[static_cast<size_t>(i)] * leverage / static_cast<double>(group));
    }
  }
  return out;
}

}  // namespace lorakv::reference
