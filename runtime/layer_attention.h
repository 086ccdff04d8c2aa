// runtime/layer_attention.h: one layer's attention for every sequence of a step in one call
// of the fused attention kernel (kernels/lora_attention.h), reading each sequence's cached
// rows where they are (a contiguous cache layer is one block of the kernel's paged view).
// Each sequence is one "agent" with its own base rows and no residuals: the plain causal
// attention, with the kernel's tiling, threads and vector code instead of a dozen ATen ops
// per sequence.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "lorakv/runtime/kv_cache.h"

namespace lorakv::runtime {

struct SequenceAttention {
  at::Tensor q;            // [T_i, num_heads, head_dim] view (unit stride in head_dim), RoPE applied
  at::Tensor q_positions;  // int64 [T_i], contiguous
  KvView kv;               // the sequence's rows at this layer, this step's included
  at::Tensor out;          // [T_i, num_heads, head_dim] view to write, q's dtype
};

// Runs every sequence's attention in one kernel call. scale: softmax scale; window > 0: a
// sliding window. Head sizes the kernel does not take (not a multiple of 32 in 32..256: tiny
// test models) run through kernels::causal_attention per sequence instead. Throws
// InvalidArgumentError (from the kernel) on inconsistent views.
void attend_sequences(const std::vector<SequenceAttention>& seqs, int64_t num_heads, int64_t num_kv_heads,
                      int64_t head_dim, double scale, int64_t window);

}  // namespace lorakv::runtime
