// tests/reference/attention_reference.h: the plainest possible attention, one query head
// and one key at a time, in double precision. Kernels are tested against it.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

namespace lorakv::reference {

// q: [Tq, H, D]; k, v: [Hkv, Tk, D]; positions int64. Returns float [Tq, H, D].
inline at::Tensor naive_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& q_pos, const at::Tensor& k_pos, double scale) {
  const int64_t tq = q.size(0), heads = q.size(1), dim = q.size(2), kv_heads = k.size(0), tk = k.size(1);
  at::Tensor qd = q.to(at::kDouble), kd = k.to(at::kDouble), vd = v.to(at::kDouble);
  at::Tensor out = at::zeros({tq, heads, dim}, at::kDouble);
  for (int64_t i = 0; i < tq; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / kv_heads);
      std::vector<double> s(static_cast<size_t>(tk), -std::numeric_limits<double>::infinity());
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < tk; ++j) {
        if (k_pos[j].item<int64_t>() > q_pos[i].item<int64_t>()) continue;
        s[static_cast<size_t>(j)] = (qd[i][h] * kd[g][j]).sum().item<double>() * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double denom = 0;
      at::Tensor acc = at::zeros({dim}, at::kDouble);
      for (int64_t j = 0; j < tk; ++j) {
        if (std::isinf(s[static_cast<size_t>(j)])) continue;
        const double w = std::exp(s[static_cast<size_t>(j)] - mx);
        denom += w;
        acc += w * vd[g][j];
      }
      out[i][h] = acc / denom;
    }
  }
  return out.to(at::kFloat);
}

}  // namespace lorakv::reference
