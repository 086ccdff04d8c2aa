// kernels/qk_unpermute.h: llama.cpp's converter stores Llama's Q and K projection rows
// permuted for its interleaved RoPE; this puts them back in Hugging Face's order, for the
// base weights (runtime/) and GGUF LoRA B factors (adapters/) alike.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace lorakv::kernels {

// Per head, GGUF rows (2j, 2j+1) go back to HF rows (j, j + head_dim/2). `w` is
// [num_heads * head_dim, ...] of any dtype (a weight [out, in], a bias [out], a LoRA B
// [out, r]); returns a contiguous tensor of the same shape and dtype. Rows must split into
// num_heads heads of an even head_dim (LORAKV_ASSERT: callers check shapes first).
at::Tensor unpermute_qk_rows(const at::Tensor& w, int64_t num_heads);

}  // namespace lorakv::kernels
