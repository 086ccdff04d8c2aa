// kernels/attention.h: dense causal attention over one sequence's cached rows, with GQA
// and masks computed from stored token positions (rows may be out of order after
// eviction). This is the plain ATen path: the forward pass runs it for head sizes the fused
// kernel (kernels/lora_attention.h) does not take (runtime/layer_attention.h).
#pragma once

#include <ATen/ATen.h>

namespace lorakv::kernels {

struct AttentionInput {
  // float32 or bfloat16 (all three alike); softmax runs in float32.
  at::Tensor q;            // [Tq, num_heads, head_dim], RoPE applied
  at::Tensor k;            // float [num_kv_heads, Tk, head_dim], RoPE applied (may be a strided view)
  at::Tensor v;            // float [num_kv_heads, Tk, head_dim]
  at::Tensor q_positions;  // int64 [Tq]
  at::Tensor k_positions;  // int64 [Tk]
  double scale = 0;        // softmax scale, usually 1/sqrt(head_dim)
  int64_t window = 0;      // > 0: sliding window, a query sees keys with q_pos - k_pos < window
};

// Each query attends to keys with position <= its own. Query heads map to KV heads in
// groups: head h reads KV head h / (num_heads / num_kv_heads), as transformers' repeat_kv.
// Returns float [Tq, num_heads, head_dim]. Throws InvalidArgumentError for inputs of other
// shapes or mixed dtypes.
at::Tensor causal_attention(const AttentionInput& in);

// RMSNorm as in Llama: x * rsqrt(mean(x^2) + eps) * weight, computed in float32.
// x: [T, hidden]; weight: float [hidden]. Returns [T, hidden] in x's dtype. Throws
// InvalidArgumentError when the sizes disagree.
// One pass per row in plain loops (the ATen formula below costs five ops and their
// temporaries per call; decode calls it 61 times per token), same arithmetic: float32 sum of
// squares, x * (1 / sqrt(mean + eps)) rounded to x's dtype, times weight in x's dtype.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
// transformers' formula on ATen ops: the reference rms_norm is tested against.
at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace lorakv::kernels
