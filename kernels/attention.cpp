// kernels/attention.cpp: dense GQA attention on ATen ops, and RMSNorm.
#include "lorakv/kernels/attention.h"

#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>

#include "lorakv/common/errors.h"

namespace lorakv::kernels {

namespace {

at::IntArrayRef sizes_of(const at::Tensor& t) { return t.defined() ? t.sizes() : at::IntArrayRef{}; }

// The shapes the header promises, checked before any ATen op can fail on them.
void check_attention_input(const AttentionInput& in) {
  LORAKV_CHECK(in.q.defined() && in.k.defined() && in.v.defined() && in.q.dim() == 3 && in.k.dim() == 3 &&
                   in.v.sizes() == in.k.sizes() && in.k.size(2) == in.q.size(2),
               InvalidArgumentError,
               "causal_attention: q [Tq, heads, head_dim] and k, v [kv_heads, Tk, head_dim] expected, got "
                   << sizes_of(in.q) << ", " << sizes_of(in.k) << " and " << sizes_of(in.v));
  LORAKV_CHECK(in.k.size(0) > 0 && in.q.size(1) % in.k.size(0) == 0, InvalidArgumentError,
               "causal_attention: " << in.q.size(1) << " query heads are not a multiple of " << in.k.size(0)
                                    << " KV heads");
  LORAKV_CHECK(in.q.scalar_type() == in.k.scalar_type() && in.k.scalar_type() == in.v.scalar_type(),
               InvalidArgumentError,
               "causal_attention: q, k, v dtypes differ: " << in.q.scalar_type() << ", " << in.k.scalar_type() << ", "
                                                           << in.v.scalar_type());
  auto positions_ok = [](const at::Tensor& p, int64_t n) {
    return p.defined() && p.dim() == 1 && p.size(0) == n && p.scalar_type() == at::kLong;
  };
  LORAKV_CHECK(positions_ok(in.q_positions, in.q.size(0)) && positions_ok(in.k_positions, in.k.size(1)),
               InvalidArgumentError,
               "causal_attention: int64 positions [" << in.q.size(0) << "] and [" << in.k.size(1) << "] expected, got "
                                                     << sizes_of(in.q_positions) << " and " << sizes_of(in.k_positions));
  LORAKV_CHECK(in.window >= 0, InvalidArgumentError, "causal_attention: negative window " << in.window);
}

}  // namespace

at::Tensor causal_attention(const AttentionInput& in) {
  check_attention_input(in);
  const int64_t tq = in.q.size(0);
  const int64_t num_heads = in.q.size(1);
  const int64_t head_dim = in.q.size(2);
  const int64_t num_kv_heads = in.k.size(0);
  const int64_t tk = in.k.size(1);
  const int64_t group = num_heads / num_kv_heads;

  // Queries of one KV group side by side: [Hkv, G * Tq, D], so one batched matmul per
  // KV head serves all its query heads without repeating K or V.
  at::Tensor q = in.q.reshape({tq, num_kv_heads, group, head_dim}).permute({1, 2, 0, 3}).reshape(
      {num_kv_heads, group * tq, head_dim});
  at::Tensor scores = at::matmul(q, in.k.transpose(1, 2)).mul_(in.scale);  // [Hkv, G*Tq, Tk]
  at::Tensor distance = in.q_positions.unsqueeze(1) - in.k_positions.unsqueeze(0);  // [Tq, Tk]
  at::Tensor allowed = distance >= 0;
  if (in.window > 0) allowed.logical_and_(distance < in.window);
  scores = scores.view({num_kv_heads, group, tq, tk})
               .masked_fill_(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  // Softmax in float32 whatever the input dtype, as transformers does.
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(in.v.scalar_type()).view({num_kv_heads, group * tq, tk});
  at::Tensor out = at::matmul(probs, in.v);  // [Hkv, G*Tq, D]
  return out.view({num_kv_heads, group, tq, head_dim}).permute({2, 0, 1, 3}).reshape({tq, num_heads, head_dim});
}

namespace {

void check_rms_norm(const at::Tensor& x, const at::Tensor& weight) {
  LORAKV_CHECK(x.defined() && weight.defined() && x.dim() >= 1 && weight.dim() == 1 && x.size(-1) == weight.size(0),
               InvalidArgumentError, "rms_norm: x [..., hidden] and weight [hidden] expected, got " << sizes_of(x)
                                                                                                    << " and "
                                                                                                    << sizes_of(weight));
}

// Rows of x [n, h] (contiguous) normalised into out, T the element type of x, out, weight.
template <typename T>
void rms_norm_rows(const T* x, const T* weight, T* out, int64_t n, int64_t h, float eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* row = x + i * h;
    float squares = 0;
    for (int64_t j = 0; j < h; ++j) squares += static_cast<float>(row[j]) * static_cast<float>(row[j]);
    const float inv = 1.0f / std::sqrt(squares / static_cast<float>(h) + eps);
    for (int64_t j = 0; j < h; ++j) {
      const T normed = static_cast<T>(static_cast<float>(row[j]) * inv);
      out[i * h + j] = static_cast<T>(static_cast<float>(weight[j]) * static_cast<float>(normed));
    }
  }
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm(x, weight);
  const bool plain = x.device().is_cpu() && weight.scalar_type() == x.scalar_type() &&
                     (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16);
  if (!plain) return rms_norm_reference(x, weight, eps);
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  at::Tensor out = at::empty_like(xc);
  const int64_t h = x.size(-1), n = x.numel() / std::max<int64_t>(h, 1);
  if (x.scalar_type() == at::kFloat) {
    rms_norm_rows(xc.data_ptr<float>(), wc.data_ptr<float>(), out.data_ptr<float>(), n, h, static_cast<float>(eps));
  } else {
    rms_norm_rows(xc.data_ptr<c10::BFloat16>(), wc.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(), n, h,
                  static_cast<float>(eps));
  }
  return out;
}

at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm(x, weight);
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor variance = xf.pow(2).mean(-1, /*keepdim=*/true);
  at::Tensor normed = xf * at::rsqrt(variance + eps);
  return (weight * normed.to(x.scalar_type()));
}

}  // namespace lorakv::kernels
