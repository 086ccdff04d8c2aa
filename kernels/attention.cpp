// kernels/attention.cpp: dense GQA attention and RMSNorm on ATen ops.
#include "kernels/attention.h"

#include "common/errors.h"

namespace lorakv::kernels {

at::Tensor causal_attention(const AttentionInput& in) {
  const int64_t tq = in.q.size(0);
  const int64_t num_heads = in.q.size(1);
  const int64_t head_dim = in.q.size(2);
  const int64_t num_kv_heads = in.k.size(0);
  const int64_t tk = in.k.size(1);
  LORAKV_ASSERT(num_heads % num_kv_heads == 0, "heads " << num_heads << " not a multiple of kv heads " << num_kv_heads);
  LORAKV_ASSERT(in.v.size(1) == tk && in.k_positions.size(0) == tk && in.q_positions.size(0) == tq,
                "attention inputs disagree on lengths");
  const int64_t group = num_heads / num_kv_heads;

  // Queries of one KV group side by side: [Hkv, G * Tq, D], so one batched matmul per
  // KV head serves all its query heads without repeating K or V.
  at::Tensor q = in.q.view({tq, num_kv_heads, group, head_dim}).permute({1, 2, 0, 3}).reshape(
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

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor variance = xf.pow(2).mean(-1, /*keepdim=*/true);
  at::Tensor normed = xf * at::rsqrt(variance + eps);
  return (weight * normed.to(x.scalar_type()));
}

}  // namespace lorakv::kernels
