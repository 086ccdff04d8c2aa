// kernels/rope.h: rotary position embedding in Hugging Face's layout (rotate_half: element
// i pairs with i + head_dim/2), driven by explicit per-row positions, never row order.
#pragma once

#include <ATen/ATen.h>

namespace lorakv::kernels {

// Inverse frequencies theta^(-2i/rotary_dim), i < rotary_dim/2, computed in float32 the way
// transformers does. Returns float32 [rotary_dim / 2].
at::Tensor rope_inv_freq(int64_t rotary_dim, double theta);

// Llama 3.1 scaling of `inv_freq` (transformers' _compute_llama3_parameters): wavelengths
// longer than original_max / low_freq_factor are divided by `factor`, shorter than
// original_max / high_freq_factor kept, and those between blended smoothly.
// inv_freq: float32 [D/2]. Returns float32 [D/2].
at::Tensor rope_llama3_scaling(const at::Tensor& inv_freq, double factor, double low_freq_factor,
                               double high_freq_factor, double original_max_position);

// cos and sin tables for the given positions. positions: int64 [T];
// inv_freq: float32 [D/2]. Returns {cos, sin}, each float32 [T, D] (halves duplicated).
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& positions, const at::Tensor& inv_freq);

// Rotates x in place of a copy. x: float [T, H, D]; cos, sin: float32 [T, D].
// Returns float [T, H, D] in x's dtype. Every function here throws InvalidArgumentError
// for arguments of other shapes (or an odd rotary_dim).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// The same rotation written into x (which may be a strided view, e.g. the q or k columns
// of a fused q|k|v projection) in one loop: no temporaries, the same float32 (or bfloat16,
// rounded after each op as ATen does) arithmetic in the same order as apply_rope.
// x: float32 or bfloat16 [T, H, D] with unit stride in D; cos, sin: float32 [T, D] contiguous.
void apply_rope_(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace lorakv::kernels
